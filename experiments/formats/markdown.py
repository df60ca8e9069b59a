"""Notes people write on experiments and runs: Markdown in, sanitised HTML out.

Other users open the pages that show a note, so the HTML Markdown makes (and any raw HTML it passes through) goes
through an allowlist sanitiser (nh3, the Rust `ammonia`): only text-formatting elements, links with http(s) or
mailto targets, no attributes but a link's href and title, no scripts, styles or event handlers.
"""

from __future__ import annotations

import markdown
import nh3

ALLOWED_TAGS = {
    "p", "br", "hr", "strong", "em", "b", "i", "del", "code", "pre", "blockquote",
    "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6", "a",
    "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}}
URL_SCHEMES = {"http", "https", "mailto"}


def render_markdown(text: str) -> str:
    """The note as safe HTML ("" for an empty note)."""
    if not text.strip():
        return ""
    html = markdown.markdown(text, extensions=["tables", "fenced_code", "sane_lists"], output_format="html")
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
