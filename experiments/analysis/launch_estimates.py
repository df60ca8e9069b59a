"""How long a launch takes on a host, as a range, learned from the launches a worker measured there: the value that
`reads/queueing.py` turns into each queued and live run's start and end, the GPU-hour quota reserves (its upper
end) and the sweep preview prices launches with.

A launch is modelled by its phases, as its timeline and its cells' ends split it (`measured_phases`):

- load: from the claim to the server warming up (connect, preflight, start the server, load the weights);
- warmup: the server's warm-up, its readiness and the smoke generation;
- cells: each benchmark cell, from the end of the one before (or the benchmark's start) to its own end; a cell's
  length grows with its waves of requests, ceil(prompts / concurrency) x output tokens (`Cell.work`);
- after: from the last cell to teardown (the last log lines, and profiling where the run was profiled);
- teardown: stopping the server and checking the GPUs are free.

Each phase's range comes from the closest measured launches on the host: of the same config, else of the same model
(other configs), else of any model. A cell of a shape none of them measured is scaled from theirs by its work. The
range is the spread of what was measured (min..max, its middle eight tenths from ten launches on), widened by a
factor that is larger for a looser basis and for fewer launches. With nothing measured on the host, each phase
ranges from zero to what its time-outs allow (`rules/gpu_hours.py`): a bound, not a forecast.

Only launches a worker measured count (`Run.measured_phases`): a seeded or imported run has none, since nobody
timed its phases.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from experiments.rules import gpu_hours

PHASES = ("load", "warmup", "after", "teardown")
# How far the range reaches beyond what was measured, by how close the launches it comes from are to this one: the
# same config repeats its phases within a few percent; another config of the model loads the same weights but may
# serve at another speed; another model loads and serves at its own.
SPREAD = {"config": 1.1, "model": 1.4, "host": 3.0}
# From this many launches on, the lowest and the highest tenth are left out of the range: one launch that hung does
# not widen every range for good.
TRIM_FROM = 10
# The launches of one basis an estimate reads: the latest, as a host's speed and its software change.
POOL_RUNS = 30
# With nothing measured: the share of the time-outs' overhead allowance (rules/gpu_hours.LAUNCH_OVERHEAD_S) given to
# warm-up and verification, and to what follows the cells; the rest to teardown.
_UNKNOWN_SHARES = {"warmup": 0.4, "after": 0.2, "teardown": 0.4}
# The states of a live run, by the phase it is in.
PHASE_OF_STATE = {
    "connecting": "load",
    "preflight": "load",
    "launching": "load",
    "loading": "load",
    "warming": "warmup",
    "ready": "warmup",
    "verifying": "warmup",
    "benchmarking": "cells",
    "teardown": "teardown",
}


@dataclass(frozen=True)
class Cell:
    """One benchmark cell's shape: what its length grows with."""

    concurrency: int
    prompts: int
    output_len: int

    @property
    def work(self) -> int:
        """Output tokens one stream decodes, wave after wave: the cell's length is about proportional to it."""
        return math.ceil(max(1, self.prompts) / max(1, self.concurrency)) * max(1, self.output_len)


@dataclass(frozen=True)
class Span:
    """A range of seconds and the point inside it the estimate expects."""

    low: float
    mid: float
    high: float

    def __add__(self, other: Span) -> Span:
        return Span(self.low + other.low, self.mid + other.mid, self.high + other.high)

    def after(self, elapsed: float) -> Span:
        """What is left of a phase `elapsed` seconds in. One that ran past its range has a little left, not none:
        it is still running."""
        left = Span(max(0.0, self.low - elapsed), max(0.0, self.mid - elapsed), max(0.0, self.high - elapsed))
        if left.high <= 0:
            return Span(0.0, 0.0, 0.25 * max(self.mid, elapsed))
        return left

    def capped(self, high: float) -> Span:
        return Span(min(self.low, high), min(self.mid, high), min(self.high, high))

    def as_json(self) -> dict[str, float]:
        return {"low": round(self.low, 1), "mid": round(self.mid, 1), "high": round(self.high, 1)}


ZERO = Span(0.0, 0.0, 0.0)


def total(spans: Iterable[Span]) -> Span:
    out = ZERO
    for span in spans:
        out = out + span
    return out


@dataclass(frozen=True)
class LaunchKind:
    """What is estimated: one launch of a config (its content hash and model) with a profile's cells, profiled or
    not, and the profile's time-outs (what bounds it when nothing is measured)."""

    config: str
    model: str
    cells: tuple[Cell, ...]
    profiled: bool
    readiness_timeout_s: float
    request_timeout_s: float

    @property
    def time_bound_s(self) -> float:
        """The longest the worker lets the launch hold the host (as the quota's rule counts it)."""
        cells = sum(gpu_hours.cell_time_bound_s(c.prompts, c.concurrency, self.request_timeout_s) for c in self.cells)
        return self.readiness_timeout_s + cells + gpu_hours.LAUNCH_OVERHEAD_S


@dataclass(frozen=True)
class MeasuredLaunch:
    """A launch a worker measured: its config, model and `measured_phases` record."""

    config: str
    model: str
    phases: Mapping[str, Any]

    @property
    def cells(self) -> list[tuple[Cell, float]]:
        return [(Cell(int(c), int(n), int(out)), float(s)) for c, n, out, s in self.phases.get("cells") or ()]


@dataclass(frozen=True)
class LaunchEstimate:
    """How long one launch should take, phase by phase, and what that rests on: `basis` is "config", "model",
    "host" (the closest measured launches on the host) or "none" (nothing measured: each phase up to its
    time-outs), `runs` how many launches."""

    load: Span
    warmup: Span
    cells: tuple[Span, ...]
    after: Span
    teardown: Span
    runs: int
    basis: str
    bound_s: float  # what the time-outs allow: no range reaches past it

    @property
    def total(self) -> Span:
        return total([self.load, self.warmup, *self.cells, self.after, self.teardown]).capped(self.bound_s)

    @property
    def seconds(self) -> float:
        """The point estimate of the whole launch (the sweep preview prices launches with it)."""
        return self.total.mid

    @property
    def is_known(self) -> bool:
        return self.basis != "none"

    @property
    def based_on(self) -> str:
        """What the estimate rests on, to be read after the estimate: "from 12 runs of this config on this host"."""
        runs = f"{self.runs} run{'s' if self.runs != 1 else ''}"
        if self.basis == "config":
            return f"from {runs} of this config on this host"
        if self.basis == "model":
            return f"from {runs} of other configs of this model on this host"
        if self.basis == "host":
            return f"from {runs} of other models on this host, a rough guide"
        return "nothing measured on this host yet: up to what the profile's time-outs allow"

    def remaining(self, phase: str, elapsed_s: float, cells_done: int = 0) -> Span:
        """What is left of a launch that has spent `elapsed_s` in `phase` ("queued", "load", "warmup", "cells",
        "teardown"; see PHASE_OF_STATE) and measured `cells_done` cells."""
        rest = [self.after, self.teardown]
        if phase == "queued":
            return self.total
        if phase == "load":
            left = total([self.load.after(elapsed_s), self.warmup, *self.cells, *rest])
        elif phase == "warmup":
            left = total([self.warmup.after(elapsed_s), *self.cells, *rest])
        elif phase == "cells":
            done = min(cells_done, len(self.cells))
            # Benchmarking spans the cells and then what follows them (profiling); time spent past the cells done
            # goes to the current one, or, with every cell done, to what follows.
            into = max(0.0, elapsed_s - total(self.cells[:done]).mid)
            if done < len(self.cells):
                left = total([self.cells[done].after(into), *self.cells[done + 1 :], *rest])
            else:
                left = total([self.after.after(into), self.teardown])
        elif phase == "teardown":
            left = self.teardown.after(elapsed_s)
        else:
            raise ValueError(f"no phase {phase!r}")
        return left.capped(self.bound_s)


def measured_phases(
    timeline: Sequence[Mapping[str, str]], cell_ends: Sequence[datetime | None], cells: Sequence[Cell], profiled: bool
) -> dict[str, Any] | None:
    """The record of a launch a worker drove to success, from its timeline (each state with when it began; the last
    is its end) and its cells' ends in benchmark order: each phase in seconds, each cell with its shape. None when a
    boundary is missing (a cell without its end): such a launch teaches nothing."""
    began: dict[str, datetime] = {}
    for entry in timeline:
        began.setdefault(entry["state"], datetime.fromisoformat(entry["at"]))
    if not timeline or len(cell_ends) != len(cells) or any(end is None for end in cell_ends):
        return None
    end = datetime.fromisoformat(timeline[-1]["at"])
    start, bench, down = began.get("connecting"), began.get("benchmarking"), began.get("teardown")
    warm = next((began[s] for s in ("warming", "ready", "verifying", "benchmarking") if s in began), None)
    if start is None or bench is None or down is None or warm is None:
        return None
    record: dict[str, Any] = {
        "load": _seconds(start, warm),
        "warmup": _seconds(warm, bench),
        "cells": [],
        "profiled": profiled,
    }
    previous = bench
    for cell, ended in zip(cells, cell_ends, strict=True):
        assert ended is not None
        ended = min(max(ended, previous), down)  # the worker's and the database's clocks may differ by a little
        record["cells"].append([cell.concurrency, cell.prompts, cell.output_len, _seconds(previous, ended)])
        previous = ended
    record["after"] = _seconds(previous, down)
    record["teardown"] = _seconds(down, end)
    record["total"] = _seconds(start, end)
    return record


def _seconds(start: datetime, end: datetime) -> float:
    return round(max(0.0, (end - start).total_seconds()), 3)


@dataclass
class LaunchHistory:
    """A host's measured launches, newest first, and the estimates read from them."""

    launches: Sequence[MeasuredLaunch] = field(default_factory=list)

    def estimate(self, kind: LaunchKind) -> LaunchEstimate:
        pools = (
            ("config", [m for m in self.launches if m.config == kind.config]),
            ("model", [m for m in self.launches if m.model == kind.model]),
            ("host", list(self.launches)),
        )
        for basis, pool in pools:
            if pool:
                return _from_pool(pool[:POOL_RUNS], kind, basis)
        return _unknown(kind)


def _from_pool(pool: Sequence[MeasuredLaunch], kind: LaunchKind, basis: str) -> LaunchEstimate:
    spread = SPREAD[basis] * (1 + 0.25 / math.sqrt(len(pool)))
    phases = {name: _span([float(m.phases.get(name) or 0.0) for m in pool], spread) for name in PHASES}
    same_kind = [m for m in pool if bool(m.phases.get("profiled")) == kind.profiled]
    measured = [cell for m in pool for cell in m.cells]
    cells = tuple(_cell_span(cell, measured, spread) for cell in kind.cells)
    if same_kind:
        phases["after"] = _span([float(m.phases.get("after") or 0.0) for m in same_kind], spread)
    elif kind.profiled:
        # Profiling none of them did: about one more cell per concurrency level, at most twice that.
        levels = {cell.concurrency: span for cell, span in zip(kind.cells, cells, strict=True)}
        extra = total(levels.values())
        phases["after"] = phases["after"] + Span(0.0, extra.mid, 2 * extra.high)
    return LaunchEstimate(
        load=phases["load"],
        warmup=phases["warmup"],
        cells=cells,
        after=phases["after"],
        teardown=phases["teardown"],
        runs=len(pool),
        basis=basis,
        bound_s=kind.time_bound_s,
    )


def _cell_span(cell: Cell, measured: Sequence[tuple[Cell, float]], spread: float) -> Span:
    same = [seconds for shape, seconds in measured if shape == cell]
    if same:
        return _span(same, spread)
    # Scaled by its work from every cell measured: a rougher guide, so a wider range.
    rates = [seconds / shape.work for shape, seconds in measured]
    if not rates:
        return ZERO
    rate = _span(rates, spread * SPREAD["model"])
    return Span(rate.low * cell.work, rate.mid * cell.work, rate.high * cell.work)


def _span(values: Sequence[float], spread: float) -> Span:
    ordered = sorted(values)
    cut = len(ordered) // 10 if len(ordered) >= TRIM_FROM else 0
    kept = ordered[cut : len(ordered) - cut]
    return Span(kept[0] / spread, statistics.median(ordered), kept[-1] * spread)


def _unknown(kind: LaunchKind) -> LaunchEstimate:
    def upto(seconds: float) -> Span:
        return Span(0.0, seconds, seconds)

    overhead = gpu_hours.LAUNCH_OVERHEAD_S
    return LaunchEstimate(
        load=upto(kind.readiness_timeout_s),
        warmup=upto(overhead * _UNKNOWN_SHARES["warmup"]),
        cells=tuple(
            upto(gpu_hours.cell_time_bound_s(c.prompts, c.concurrency, kind.request_timeout_s)) for c in kind.cells
        ),
        after=upto(overhead * _UNKNOWN_SHARES["after"]),
        teardown=upto(overhead * _UNKNOWN_SHARES["teardown"]),
        runs=0,
        basis="none",
        bound_s=kind.time_bound_s,
    )
