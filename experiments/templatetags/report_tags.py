"""Filters for the comparison page, whose tables hold thousands of numbers and whose figures are large JSON:
the built-in filters' generality (localization, any encoder) costs tens of milliseconds there
(bench/comparison_page.py)."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


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
    seconds = max(0, round(float(seconds)))
    if seconds < 90:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
