"""The figures of the scale benches, pure: what a watcher of a live log received, and where a run's time went.
many_watchers.py and many_hosts.py print them; dashboard/tests/test_bench_scale_figures.py checks them, so a wrong
count cannot pass for a clean run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workers.benchclient.metrics import percentile  # numpy's default method, as the benchmark client reports

# The states a run spends outside specdash's own work: the server loading its weights (the GPU's time, which the
# simulated host stretches by SIMHOST_LOAD_SECONDS) and the benchmark cells. The rest is orchestration.
NOT_ORCHESTRATION = ("loading", "benchmarking")
_LINE_NUMBER = re.compile(r"\[(\d+)\]")


@dataclass
class Delivery:
    """One websocket client's account of a log of `expected` lines, numbered from 1, each line's text carrying its
    own number in brackets and, last, the wall clock when it was written.

    Every line must arrive exactly once and in order: a message must start right after the highest line so far."""

    expected: int
    received: bytearray = field(init=False)
    out_of_order: int = 0  # messages that did not start right after the highest line received before them
    wrong_text: int = 0  # lines whose text is not the line of their number
    latencies: list[float] = field(default_factory=list)  # seconds, written -> received, for each first arrival
    highest: int = 0

    def __post_init__(self) -> None:
        self.received = bytearray(self.expected + 1)

    def add(self, first: int, lines: Sequence[str], now: float) -> None:
        if first != self.highest + 1:
            self.out_of_order += 1
        for number, text in enumerate(lines, start=first):
            match = _LINE_NUMBER.search(text)
            if match is None or int(match[1]) != number:
                self.wrong_text += 1
            if 1 <= number <= self.expected:
                if self.received[number] == 0:
                    self.latencies.append(now - float(text.rsplit(" ", 1)[1]))
                self.received[number] = min(self.received[number] + 1, 255)
        self.highest = max(self.highest, first + len(lines) - 1)

    @property
    def complete(self) -> bool:
        return self.highest >= self.expected

    @property
    def missing(self) -> int:
        return sum(1 for count in self.received[1:] if count == 0)

    @property
    def duplicates(self) -> int:
        return sum(count - 1 for count in self.received[1:] if count > 1)

    def summary(self) -> dict[str, Any]:
        return {"missing": self.missing, "duplicates": self.duplicates, "out_of_order": self.out_of_order,
                "wrong_text": self.wrong_text, "latencies": self.latencies}  # fmt: skip


def phase_seconds(phases: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Seconds spent in each state, from `Run.phases()` (a state entered twice counts twice; the open last one not)."""
    spent: dict[str, float] = {}
    for phase in phases:
        if phase["duration_s"] is not None:
            spent[phase["state"]] = spent.get(phase["state"], 0.0) + phase["duration_s"]
    return spent


def run_times(phases: Sequence[dict[str, Any]]) -> dict[str, float]:
    """A finished run's wall time from its claim (`connecting`) to its end, the time it queued before the claim, and
    its orchestration overhead: the wall time less loading and benchmarking."""
    spent = phase_seconds(phases)
    wall = sum(seconds for state, seconds in spent.items() if state != "queued")
    outside = sum(spent.get(state, 0.0) for state in NOT_ORCHESTRATION)
    return {"wall": wall, "queued": spent.get("queued", 0.0), "overhead": wall - outside, **spent}


def distribution(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": percentile(ordered, 50), "p95": percentile(ordered, 95), "p99": percentile(ordered, 99),
            "max": ordered[-1]}  # fmt: skip


def starved(waits: Sequence[float], *, slack: float = 3.0, factor: float = 2.0) -> list[int]:
    """The indices of the waits for a worker that stand out: longer than `factor` times the median and more than
    `slack` seconds beyond it (a wait of a few hundred ms is never starvation, however it compares)."""
    if not waits:
        return []
    median = percentile(sorted(waits), 50)
    return [i for i, wait in enumerate(waits) if wait > factor * median and wait > median + slack]


def slot_waits(runs: Sequence[dict[str, Any]]) -> list[float]:
    """How long each claimed run waited for a worker once it could start: from when it was queued, or when the run
    before it on its host finished if that was later (a host runs one run at a time), to its claim. `runs`: dicts of
    `host`, `queued`, `claimed` and `finished` (epoch seconds; None where the run never got there)."""
    waits = []
    host_freed: dict[Any, float] = {}
    for run in sorted((r for r in runs if r["claimed"] is not None), key=lambda r: r["claimed"]):
        could_start = max(run["queued"], host_freed.get(run["host"], run["queued"]))
        waits.append(run["claimed"] - could_start)
        if run["finished"] is not None:
            host_freed[run["host"]] = run["finished"]
    return waits
