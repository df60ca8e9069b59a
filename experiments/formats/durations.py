"""Durations in words (pure): what the pages, the API's texts and the templates' `duration` filter print."""

from __future__ import annotations

DAY_S = 86_400


def in_words(seconds: float) -> str:
    """Seconds as a person reads an estimate: "45 s", "12 min", "3 h 20 min"."""
    seconds = max(0, round(float(seconds)))
    if seconds < 90:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def span_in_words(seconds: float) -> str:
    """A stretch of calendar time: `in_words` up to two days, whole days past them ("13 days")."""
    return f"{round(seconds / DAY_S)} days" if seconds >= 2 * DAY_S else in_words(seconds)
