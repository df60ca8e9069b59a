"""Pure figures: data in, a Plotly figure dict out, in one shared style (no Django, no database)."""
