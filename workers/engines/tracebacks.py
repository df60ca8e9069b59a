"""Python's traceback blocks as any engine's log holds them (its API server, its scheduler or engine core): the head
line, and the chained traceback that may follow an exception. Pure; shared by each engine's `failures`."""

from __future__ import annotations

from collections.abc import Sequence

TRACEBACK_HEAD = "Traceback (most recent call last):"
CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def chained_traceback_after(texts: Sequence[str], index: int) -> int | None:
    """Where the chained traceback after an exception ending before `index` starts its frames (the line after its
    head), past blank lines and the "During handling ..." line; None when none follows."""
    look = index
    while look < len(texts) and not texts[look].strip():
        look += 1
    if look < len(texts) and texts[look].startswith(CHAINED):
        look += 1
        while look < len(texts) and not texts[look].strip():
            look += 1
        if look < len(texts) and texts[look].startswith(TRACEBACK_HEAD):
            return look + 1
    return None
