"""What the commands print: plain aligned tables, the verdict table, and terminal-safe text (names, log lines and
messages come from other users and from servers: their control characters are shown escaped, never sent to the
terminal as escape sequences)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def safe(value: Any) -> str:
    """`value` as one line a terminal prints as it reads (tabs kept; other control characters escaped)."""
    text = "" if value is None else str(value)
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


def table(headings: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[safe(h) for h in headings], *([safe(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headings))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def interval(low: float | None, high: float | None, digits: int = 3) -> str:
    return "" if low is None or high is None else f"[{low:.{digits}f}, {high:.{digits}f}]"


def said(row: dict[str, Any]) -> str:
    """A comparison row's ratio and interval as the server's pages write them (`said`: bounds with the decimals that
    keep them on their side of 1); from the numbers where a server does not say."""
    if row.get("said"):
        return str(row["said"])
    return f"{row['speedup']:.3f}x " + interval(row.get("ci_low"), row.get("ci_high"))


def verdict_text(row: dict[str, Any]) -> str:
    """The verdict with what would settle it and why it is what it is (outputs differ, acceptance collapsed)."""
    reasons = [r for r in row.get("reasons") or [] if not r.startswith("not settled")]
    needs = f" ({row['needs']})" if row.get("needs") else ""
    return row["verdict"] + needs + "".join(f"; {reason}" for reason in reasons)


def verdict_table(experiment: dict[str, Any]) -> str:
    """The comparison as the experiment JSON gives it: speedup with its interval and verdict per candidate and
    concurrency, with the accept length of the cell."""
    accept = {
        (name, cell["concurrency"]): cell["mean"]
        for name, cells in (experiment.get("accept_length") or {}).items()
        for cell in cells
    }
    rows = [
        (
            row["candidate"],
            row["concurrency"],
            number(row["baseline_tok_s"], 1),
            number(row["candidate_tok_s"], 1),
            said(row),
            number(accept.get((row["candidate"], row["concurrency"]))),
            verdict_text(row),
        )
        for row in experiment.get("comparison") or []
    ]
    if not rows:
        return "No comparison yet (nothing measured, or no candidate)."
    headings = ("candidate", "c", "baseline tok/s", "candidate tok/s", "speedup [95% CI]", "accept len", "verdict")
    return table(headings, rows)
