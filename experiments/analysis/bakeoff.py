"""The bake-off (pure): every speculative method of an experiment or a study side by side, per concurrency band.

One line per method and engine ("EAGLE3 · SGLang", "ngram · vLLM"), one cell per concurrency: the method's best
candidate there, its speedup with its interval and verdict, and its correctness gate. The cells are rows of the one
comparison, and the winner of each concurrency is the comparison's (`verdicts.Comparison.winners`, or a study's
recommendation, `tuning.recommend`): the bake-off only groups them by method, so it can never say another thing than
the experiment's or the study's own page. Neighbouring concurrencies with the same winning method form a band.

What a method costs besides time is read from the servers' own logs, per GPU: the weights its drafter loads, and the
KV-cache tokens its server holds against the baseline's (a drafter's own weights and KV cache come out of the pool
the target's requests live in: fewer tokens is a shorter longest context, or a smaller largest batch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .comparison import FASTER, ComparisonRow
from .intervals import ratio_text
from .verdicts import GateOutcome, Winner

NO_SPECULATION = "no speculation"


@dataclass(frozen=True)
class Method:
    """A speculative method on an engine: what one bake-off line stands for."""

    algorithm: str  # as the engine spells it (SGLang's EAGLE3, vLLM's eagle3)
    engine: str  # the engine's label (SGLang, vLLM)

    @property
    def label(self) -> str:
        return f"{self.algorithm} · {self.engine}"


@dataclass(frozen=True)
class Costs:
    """What a config's servers said about memory, per GPU: the KV pool's tokens (the fewest over its launches) and the
    weights of its drafter (GiB; None where the engine logs no separate figure for it)."""

    kv_tokens: int | None = None
    draft_weights_gib: float | None = None


@dataclass(frozen=True)
class Cell:
    concurrency: int
    candidate: str
    row: ComparisonRow
    said: str  # "1.31x [1.22, 1.40]"
    reasons: tuple[str, ...]  # why the verdict is what it is beyond its numbers (the comparison's own words)
    gate: GateOutcome  # the output-equivalence gate of the candidate
    wins: bool  # the winner of its concurrency


@dataclass(frozen=True)
class Line:
    method: Method
    candidates: tuple[str, ...]
    cells: dict[int, Cell]
    costs: Costs
    kv_tokens_given_up: int | None  # against the baseline's pool; None when either is unknown
    kv_share_given_up: float | None

    @property
    def cost_text(self) -> str:
        parts = []
        if self.costs.draft_weights_gib is not None:
            parts.append(f"drafter weights {self.costs.draft_weights_gib:.2f} GiB per GPU")
        if self.kv_tokens_given_up is not None and self.kv_share_given_up is not None:
            if self.kv_tokens_given_up > 0:
                parts.append(
                    f"{self.kv_tokens_given_up:,} fewer KV-cache tokens than the baseline "
                    f"({self.kv_share_given_up:.0%} of its pool)"
                )
            else:
                parts.append("no KV-cache tokens given up")
        return "; ".join(parts) or "not logged"


@dataclass(frozen=True)
class Band:
    """Neighbouring concurrencies with the same winning method (None: no speculation)."""

    low: int
    high: int
    method: Method | None
    winners: tuple[Winner, ...]

    @property
    def label(self) -> str:
        return f"c = {self.low}" if self.low == self.high else f"{self.low} <= c <= {self.high}"


@dataclass
class Bakeoff:
    baseline: str
    levels: list[int]
    lines: list[Line]
    bands: list[Band]
    baseline_kv_tokens: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def table(self) -> list[tuple[Line, list[Cell | None]]]:
        """Each line with its cell at every concurrency of the bake-off (None where it was not measured)."""
        return [(line, [line.cells.get(level) for level in self.levels]) for line in self.lines]

    @property
    def headline(self) -> str | None:
        """The answer in one sentence: the winning method of each band with its interval, or no speculation."""
        if not self.bands:
            return None
        parts = []
        for band in self.bands:
            first = band.winners[0]
            if band.method is None or first.row is None or first.candidate is None:
                unsettled = [w for w in band.winners if not w.settled and w.row is not None]
                tail = ""
                if unsettled:
                    row = unsettled[0].row
                    assert row is not None
                    tail = f" (not settled: {row.candidate} at c = {row.concurrency}, {_said(row)})"
                parts.append(f"{band.label}: {NO_SPECULATION}{tail}")
                continue
            row = first.row
            parts.append(f"{band.label}: {band.method.label}, {first.candidate} {_said(row)} at c = {row.concurrency}")
        return "Best method by concurrency: " + "; ".join(parts) + "."


def _said(row: ComparisonRow) -> str:
    return ratio_text(row.speedup, row.ci_low, row.ci_high)


def build(
    rows: Sequence[ComparisonRow],
    *,
    baseline: str,
    winners: Mapping[int, Winner],
    methods: Mapping[str, Method],
    costs: Mapping[str, Costs],
    reasons: Callable[[ComparisonRow], Sequence[str]],
    gate: Callable[[str], GateOutcome],
    may_win: Callable[[ComparisonRow], bool],
) -> Bakeoff:
    """The bake-off over the comparison's `rows` and the `winners` of each concurrency (both the comparison's: a
    `verdicts.Comparison`'s rows and `winners()`, or a study's rows and recommendation). `methods` names each
    candidate's method (those without one, the baseline's copies, are left out); `costs` has the baseline's too.

    A line's cell at a concurrency is the winner where the winner is of its method, else its fastest candidate that
    may win there (`may_win`: not gated out), else its fastest candidate at all, whose reasons then say why it may
    not."""
    levels = sorted({row.concurrency for row in rows} | set(winners))
    by_method: dict[Method, list[str]] = {}
    for name, method in methods.items():
        if name != baseline:
            by_method.setdefault(method, []).append(name)
    baseline_kv = costs.get(baseline, Costs()).kv_tokens
    lines = []
    for method, names in by_method.items():
        own = [row for row in rows if row.candidate in names]
        if not own:
            continue
        cells = {}
        for level in levels:
            here = [row for row in own if row.concurrency == level]
            if not here:
                continue
            winner = winners.get(level)
            won = [row for row in here if winner is not None and row.candidate == winner.candidate]
            chosen = won or sorted(here, key=lambda row: (not may_win(row), row.verdict != FASTER, -row.speedup))
            row = chosen[0]
            cells[level] = Cell(
                level, row.candidate, row, _said(row), tuple(reasons(row)), gate(row.candidate), bool(won)
            )
        kv = _fewest(costs.get(name, Costs()).kv_tokens for name in names)
        weights = _most(costs.get(name, Costs()).draft_weights_gib for name in names)
        given_up = baseline_kv - kv if baseline_kv is not None and kv is not None else None
        share = given_up / baseline_kv if given_up is not None and baseline_kv else None
        lines.append(Line(method, tuple(names), cells, Costs(kv, weights), given_up, share))
    lines.sort(key=lambda line: (line.method.engine, line.method.algorithm))
    return Bakeoff(baseline, levels, lines, _bands(winners, methods), baseline_kv)


def _bands(winners: Mapping[int, Winner], methods: Mapping[str, Method]) -> list[Band]:
    out: list[Band] = []
    for level in sorted(winners):
        winner = winners[level]
        method = methods.get(winner.candidate) if winner.candidate is not None else None
        if out and out[-1].method == method:
            last = out[-1]
            out[-1] = Band(last.low, level, method, (*last.winners, winner))
        else:
            out.append(Band(level, level, method, (winner,)))
    return out


def _fewest(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _most(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None
