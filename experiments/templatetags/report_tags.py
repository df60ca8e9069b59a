"""Filters for the comparison page, whose tables hold thousands of numbers and whose figures are large JSON:
the built-in filters' generality (localization, any encoder) costs tens of milliseconds there
(bench/comparison_page.py)."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from experiments.analysis.intervals import ratio_bounds_text
from experiments.formats import durations
from experiments.formats.markdown import render_markdown

register = template.Library()


@register.filter
def ci_bounds(row: Any) -> str:
    """A comparison row's 95% interval (a dict's or an object's `ci_low` and `ci_high`) as its two bounds with an en
    dash between: three decimals, more where rounding would put a bound on the other side of 1 (an interval that
    excludes 1 never reads as reaching it)."""
    if isinstance(row, dict):
        low, high = row.get("ci_low"), row.get("ci_high")
    else:
        low, high = getattr(row, "ci_low", None), getattr(row, "ci_high", None)
    if low is None or high is None:
        return ""
    low_text, high_text = ratio_bounds_text(low, high, 3)
    return f"{low_text} – {high_text}"


@register.filter
def fixed(value: Any, digits: int = 1) -> str:
    """`value` with exactly `digits` decimals, "" when it is not a number: what `floatformat:N` prints for a
    positive N on this English-only site, about ten times cheaper. (A value whose decimal text ends in a 5 just
    past the last digit may round the other way: floatformat rounds that text half up, this the binary value.)"""
    if value is None or isinstance(value, bool):
        return ""
    try:
        return f"{float(value):.{int(digits)}f}"
    except (TypeError, ValueError):
        return ""


@register.filter
def figure_script(figure: dict[str, Any], element_id: str) -> SafeString:
    """`json_script` for a plain-JSON figure: the same escaping of <, > and & (so the JSON cannot close the
    script element), by three str.replace passes instead of a per-character translate table."""
    text = json.dumps(figure, separators=(",", ":"))
    text = text.replace("<", "\\u003C").replace(">", "\\u003E").replace("&", "\\u0026")
    return format_html('<script id="{}" type="application/json">{}</script>', element_id, mark_safe(text))


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    """`mapping[key]` in a template, None when absent (Django's lookups cannot take a variable key)."""
    return mapping.get(key) if mapping else None


@register.filter
def duration(seconds: Any) -> str:
    """Seconds as a person reads an estimate: "45 s", "12 min", "3 h 20 min"."""
    if seconds is None:
        return "—"
    return durations.in_words(seconds)


@register.filter
def markdown(text: str) -> SafeString:
    """A note's Markdown as HTML, through the allowlist sanitiser of `experiments/formats/markdown.py`."""
    return mark_safe(render_markdown(text or ""))


@register.filter
def sort_url(query: Any, column: str) -> str:
    """The experiments table's header link for `column` (a `listing.ListingQuery`)."""
    return str(query.sort_url(column))


@register.filter
def tag_url(query: Any, tag: str) -> str:
    return str(query.url(tag=tag, page=1))


@register.filter
def page_url(query: Any, number: int) -> str:
    return str(query.url(page=number))


@register.filter
def get_index(sequence: Any, index: int) -> Any:
    """`sequence[index]` in a template, None when out of range."""
    try:
        return sequence[index]
    except (IndexError, TypeError):
        return None
