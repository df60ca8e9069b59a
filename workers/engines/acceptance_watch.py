"""The live acceptance alarm: a speculative server whose draft is accepted (next to) never, said while it benchmarks.

Fed the step points `LogFacts` reads (`running_req`, `accept_len`, line number `n`: SGLang's Decode-batch lines,
vLLM's SpecDecoding lines) as they arrive. Two rules, each over consecutive step lines that had requests running (a
line with none says nothing about drafts and neither counts nor breaks a streak; a line without an accept length, a
baseline's, is skipped the same way):

- collapse: accept length <= COLLAPSED (1.0 is "no draft accepted, only the bonus token"; the margin is the
  two-decimal rounding of the log) on COLLAPSE_TICKS lines in a row. A line averages `--decode-log-interval` (40)
  verify steps per running request (vLLM's line: 10 s of steps), so a healthy EAGLE3 config (accept length ~2-3)
  never shows one such line, let alone three, and three lines take ~2-3 s at batch 1 on a real SGLang server.
- far below the config's own history: the accepted drafts per step (accept length - 1) under LOW_SHARE of the median
  of its last successful runs' on LOW_TICKS lines in a row; only when that history accepted something.

It says so once (the first rule to hold), with what it saw and what was expected. Pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The same figure the verdict calls a collapse (one rule for the live alarm and the comparison).
from experiments.analysis.verdicts import COLLAPSED

COLLAPSE_TICKS = 3
LOW_SHARE = 0.5
LOW_TICKS = 5
# A history whose accept length is below this accepted too little to say "far below" by.
MIN_HISTORY_ACCEPT = 1.2
COLLAPSE, LOW = "acceptance_collapse", "acceptance_low"
ALARM_KINDS = (COLLAPSE, LOW)


@dataclass(frozen=True)
class AcceptanceAlarm:
    kind: str  # COLLAPSE or LOW
    message: str
    observed: float  # the mean accept length of the lines that raised it
    expected: float | None  # the median of the config's history, when it has one
    first_line: int
    last_line: int


class AcceptanceWatch:
    """The two rules over one server's Decode lines (see the module's docstring); `history`: the accept lengths of the
    config's last successful runs; `diagnosis`: what the models' config.json files already prove (e.g. an EAGLE3 draft
    served as EAGLE), said with a collapse."""

    def __init__(self, history: Sequence[float] = (), *, diagnosis: str = "", step_lines: str = "Decode lines") -> None:
        self.step_lines = step_lines  # what the engine's step lines are called in the alarm's message
        self.history_runs = len(history)
        self.expected = statistics.median(history) if history else None
        self.diagnosis = diagnosis
        self.fired = False
        self._collapsed: list[tuple[int, float]] = []
        self._low: list[tuple[int, float]] = []

    @property
    def low_bound(self) -> float | None:
        """The accept length under which a line counts as far below the history; None without a usable history."""
        if self.expected is None or self.expected < MIN_HISTORY_ACCEPT:
            return None
        return 1 + LOW_SHARE * (self.expected - 1)

    def feed(self, points: Iterable[Mapping[str, Any]]) -> AcceptanceAlarm | None:
        """Read Decode points in log order; the alarm the first time a rule holds, else None (and None ever after)."""
        for point in points:
            if self.fired:
                return None
            accept, running = point.get("accept_len"), point.get("running_req")
            if accept is None or not running:
                continue
            seen = (int(point["n"]), float(accept))
            self._collapsed = [*self._collapsed, seen] if accept <= COLLAPSED else []
            bound = self.low_bound
            self._low = [*self._low, seen] if bound is not None and accept < bound else []
            if len(self._collapsed) >= COLLAPSE_TICKS:
                return self._fire(COLLAPSE, self._collapsed[-COLLAPSE_TICKS:])
            if len(self._low) >= LOW_TICKS:
                return self._fire(LOW, self._low[-LOW_TICKS:])
        return None

    def _fire(self, kind: str, lines: list[tuple[int, float]]) -> AcceptanceAlarm:
        self.fired = True
        observed = statistics.fmean(a for _, a in lines)
        first, last = lines[0][0], lines[-1][0]
        seen = (
            f"accept length {observed:.2f} on {len(lines)} {self.step_lines} in a row with requests running "
            f"(log lines {first}-{last})"
        )
        history = (
            f"a median of {self.expected:.2f} over this config's last {self.history_runs} successful "
            f"run{'s' if self.history_runs != 1 else ''}"
            if self.expected is not None
            else None
        )
        if kind == COLLAPSE:
            expected = f"where {history} was expected" if history else "where a working draft accepts some"
            message = (
                f"Acceptance collapsed: {seen}, {expected}. The server accepts no draft token, so speculation only "
                "adds cost and this run's throughput says nothing about the draft."
            )
            if self.diagnosis:
                message += f" {self.diagnosis}"
        else:
            message = (
                f"Acceptance fell far below this config's history: {seen}, against {history} (under "
                f"{LOW_SHARE:.0%} of its accepted drafts per step)."
            )
        message += " Likely causes below."
        return AcceptanceAlarm(kind, message, observed, self.expected, first, last)
