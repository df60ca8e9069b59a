"""A run's estimated start and end in words (pure): "starts in 1-3 min, done by 18:42-18:47 UTC (from 12 runs of this
config on this host)". The pages print it as rendered, and `static/live.js` (`specdashEstimateText`) words it again
from the same times as they pass, the same way."""

from __future__ import annotations

from datetime import datetime

from .durations import in_words


def range_in_words(low: float, high: float) -> str:
    """A range of seconds after "in": "1-3 min", "45 s-2 min", "within 5 s" (from about now)."""
    top = in_words(high)
    if low < 1:
        return f"within {top}"
    bottom = in_words(low)
    if top.endswith(" min") and top.count(" ") == 1 and round(low / 60) >= 1:
        bottom = f"{round(low / 60)} min"  # in the top's unit: "1-3 min", not "60 s-3 min"
    if bottom == top:
        return f"in {top}"
    number, _, unit = bottom.partition(" ")
    if " " not in unit and top.endswith(f" {unit}") and top.count(" ") == 1:
        return f"in {number}-{top}"  # one unit: "1-3 min"
    return f"in {bottom}-{top}"


def clock_range(low: datetime, high: datetime, now: datetime) -> str:
    """Two instants as a clock reads them, in UTC: "18:42-18:47 UTC", one time where both read the same, a date
    where not today."""
    bottom, top = _clock(low, now), _clock(high, now)
    return f"{top} UTC" if bottom == top else f"{bottom}-{top} UTC"


def estimate_text(
    *,
    now: datetime,
    starts: tuple[datetime, datetime] | None,
    ends: tuple[datetime, datetime] | None,
    queued: bool,
    known: bool,
    based_on: str,
) -> str:
    """A queued run: when it starts and when it is done; a live one (or an experiment): when it is done. `known`:
    from measured launches (else each bound is what the time-outs allow: "at the latest")."""
    if ends is None:
        return "cannot start until its host is cleaned"
    seconds = (ends[1] - now).total_seconds()
    if queued and starts is not None:
        start = (starts[1] - now).total_seconds()
        if start <= 0:
            when = f"should have started by {clock_range(starts[1], starts[1], now)}"
        else:
            when = f"starts {range_in_words((starts[0] - now).total_seconds(), start)}"
    elif seconds <= 0:
        return f"should have been done by {clock_range(ends[1], ends[1], now)} ({based_on})"
    else:
        when = ""
    by = clock_range(ends[0], ends[1], now)
    if not known:
        done = f"done by {clock_range(ends[1], ends[1], now)} at the latest"
    elif when:
        done = f"done by {by}"
    else:
        done = f"done {range_in_words((ends[0] - now).total_seconds(), seconds)}, by {by}"
    return f"{when}, {done} ({based_on})" if when else f"{done} ({based_on})"


def _clock(at: datetime, now: datetime) -> str:
    return at.strftime("%H:%M") if at.date() == now.date() else at.strftime("%Y-%m-%d %H:%M")
