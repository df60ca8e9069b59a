"""Pure content in and out: prompt sets, Markdown notes, notification texts, the run page's server facts."""
