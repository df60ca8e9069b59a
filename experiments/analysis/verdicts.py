"""The one answer: an experiment's (or picked runs') `Comparison`, made once from its samples by `judge` and read by
every page, the API, the exports, the notifications and the CLI, so that none of them can say another thing.

`compare_configs` makes the rows (the statistics, `comparison.py`); the value adds what the rows alone do not know
and every reader must say the same way:
- the output-equivalence gate: a candidate in `outputs_differ` has every verdict replaced by OUTPUTS_DIFFER;
- the exemption of simulated acceptance (`simulated`, a headroom study's copies that measure what a better draft would
  be worth): their rows are shown, but they are never the headline, the best row, or judged by a gate, and their
  outputs are not the model's to compare;
- acceptance collapse: a speculative candidate whose mean accept length at a concurrency is at most COLLAPSED (1.0 is
  "only the bonus token": the target rejected every draft token) pays for its draft and gets nothing; each of its rows
  carries that reason, in the verdict sentence itself;
- degenerate benchmarks (`degenerate`, analysis/degenerate.py: `config_reasons` of the runs' stored findings): a
  candidate whose runs loop, answer degenerately, send repeated or filler prompts or another prompt template than the
  baseline's measured the benchmark, not the draft; its rows are shown with that reason, but never the headline, the
  best row, a recommendation, or passed by a gate. A degenerate baseline makes every verdict untrustworthy: no row is
  best, the headline says so, and every gate fails;
- what an inconclusive row needs (`needs`, `launches`) and the rules of the CLI gate (`slower_gate`,
  `outputs_gate`), so that the pages show the rule the gate applies.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .cards import VerdictCard, settled_break_evens, verdict_cards
from .comparison import (
    FASTER,
    INCONCLUSIVE,
    SLOWER,
    ComparisonRow,
    Sample,
    best_row,
    break_even_concurrency,
    compare_configs,
    is_usable,
    launches_to_settle,
    never_pays,
    settling_note,
)
from .equivalence import OUTPUTS_DIFFER
from .intervals import ratio_text

# A cell's mean accept length at or below this is a collapse (1.0 plus the two-decimal rounding of a log line); the
# live alarm (workers/sglang/acceptance_watch.py) fires on the same figure.
COLLAPSED = 1.05
PASSED, FAILED = "passed", "failed"  # a gate's outcomes, with INCONCLUSIVE
MATCHES, UNDECIDED = "matches", "undecided"  # `within_tolerance`'s answers, with SLOWER


@dataclass(frozen=True)
class GateOutcome:
    outcome: str  # PASSED, FAILED or INCONCLUSIVE
    message: str


@dataclass(frozen=True)
class Winner:
    """Who wins at one concurrency: `candidate` (None: the baseline, no speculation) with its row; for the baseline,
    `row` is the best contender that did not settle (None: every candidate is settled slower or may not win)."""

    concurrency: int
    candidate: str | None
    row: ComparisonRow | None
    settled: bool


@dataclass(frozen=True)
class Comparison:
    baseline: str
    candidates: tuple[str, ...]
    rows: tuple[ComparisonRow, ...]
    passes_per_launch: int
    simulated: frozenset[str] = frozenset()
    outputs_differ: frozenset[str] = frozenset()
    # Candidates whose outputs were compared with the baseline's and matched.
    outputs_match: frozenset[str] = frozenset()
    # Why outputs were not compared for a candidate in neither set ("" : no reason known beyond "not measured").
    outputs_unjudged: str = ""
    # (candidate, concurrency) -> mean accept length of its usable samples (speculative candidates only).
    accept_length: Mapping[tuple[str, int], float] = field(default_factory=dict)
    # Config (candidate or baseline) -> why its runs measure a degenerate benchmark (analysis/degenerate.py).
    degenerate: Mapping[str, str] = field(default_factory=dict)

    # -- the rows a page shows, and the answers read from them ---------------------------------------------------

    @property
    def judged_rows(self) -> list[ComparisonRow]:
        """The rows a verdict may be read from: not those of simulated acceptance."""
        return [row for row in self.rows if row.candidate not in self.simulated]

    @property
    def trusted_rows(self) -> list[ComparisonRow]:
        """The rows a winner may be read from: judged rows of candidates whose runs are not degenerate, against a
        baseline whose runs are not (none when it is): what `best`, recommendations and study winners read."""
        if self.baseline in self.degenerate:
            return []
        return [row for row in self.judged_rows if row.candidate not in self.degenerate]

    @property
    def best(self) -> ComparisonRow | None:
        """The row a one-line summary shows (the experiments table, the notification, the headline)."""
        return best_row(self.trusted_rows)

    def degenerate_reason(self, row: ComparisonRow) -> str | None:
        """Why the row measures a degenerate benchmark (its candidate's runs, or the baseline's), else None."""
        if self.baseline in self.degenerate:
            why = self.degenerate[self.baseline]
            return f"the baseline's runs are degenerate: {why}; no verdict against it can be trusted"
        if row.candidate in self.degenerate:
            return f"its runs are degenerate: {self.degenerate[row.candidate]}"
        return None

    @property
    def measured(self) -> list[str]:
        return [name for name in self.candidates if any(row.candidate == name for row in self.rows)]

    @property
    def break_even(self) -> dict[str, int | None]:
        """Per measured candidate: the lowest concurrency where its speedup drops below 1 (None: never)."""
        return {name: break_even_concurrency(self.rows, name) for name in self.measured}

    @property
    def never_pays(self) -> list[str]:
        return [name for name in self.candidates if never_pays(self.rows, name)]

    @property
    def settled_break_even(self) -> dict[str, int]:
        """The break-evens a page may state: where the speedup crosses 1 between two conclusive cells."""
        return settled_break_evens(self.rows, self.break_even)

    def collapsed(self, row: ComparisonRow) -> float | None:
        """The cell's accept length where it collapsed, else None."""
        accept = self.accept_length.get((row.candidate, row.concurrency))
        return accept if accept is not None and accept <= COLLAPSED else None

    def reasons(self, row: ComparisonRow) -> list[str]:
        """Why the row's verdict is what it is, beyond its numbers: what the verdict sentence says after them."""
        out = []
        if row.verdict == OUTPUTS_DIFFER:
            out.append("its outputs differ from the baseline's at temperature 0")
        accept = self.collapsed(row)
        if accept is not None:
            out.append(f"its acceptance collapsed (accept length {accept:.2f}: the target rejected every draft token)")
        degenerate = self.degenerate_reason(row)
        if degenerate is not None:
            out.append(degenerate)
        if row.candidate in self.simulated:
            out.append("its accept length is simulated: a speed a better draft would have, never a result to deploy")
        if row.verdict == INCONCLUSIVE:
            out.append(f"not settled: it {self.needs(row)}")
        return out

    def said(self, row: ComparisonRow) -> str:
        """The row's ratio and interval as every reader prints it ("0.97x [0.962, 0.986]")."""
        return ratio_text(row.speedup, row.ci_low, row.ci_high)

    def needs(self, row: ComparisonRow) -> str:
        return settling_note(row, self.passes_per_launch)

    def launches(self, row: ComparisonRow) -> int | None:
        return launches_to_settle(row, self.passes_per_launch)

    @property
    def headline(self) -> str | None:
        """The answer a page leads with, in one sentence with its interval and its reasons."""
        if self.baseline in self.degenerate and self.rows:
            return (
                f"No verdict can be trusted: the baseline's runs are degenerate ({self.degenerate[self.baseline]}), so "
                "every speedup against them measures the benchmark, not the draft."
            )
        best = self.best
        if best is None:
            flagged = [name for name in self.measured if name in self.degenerate and name not in self.simulated]
            if flagged:
                name = flagged[0]
                return (
                    f"No trustworthy result: {name}'s runs are degenerate ({self.degenerate[name]}), so its speed "
                    "is not a property of the draft."
                )
            return None
        at = f"at concurrency {best.concurrency}"
        said = self.said(best)
        if best.verdict == OUTPUTS_DIFFER:
            sentence = (
                f"{best.candidate} ran {said} the baseline's output throughput {at}, but its outputs differ from the "
                "baseline's: not a win"
            )
        elif best.verdict == FASTER:
            sentence = f"{best.candidate} serves {said} the baseline's output throughput {at}: faster"
        elif best.verdict == SLOWER:
            sentence = f"No candidate beats the baseline: the best, {best.candidate}, runs {said} {at}"
        else:
            sentence = f"Not settled: the best, {best.candidate}, runs {said} {at}; it {self.needs(best)}"
        accept = self.collapsed(best)
        if accept is not None:
            sentence += f"; its acceptance collapsed (accept length {accept:.2f})"
        return sentence + "."

    @property
    def cards(self) -> list[VerdictCard]:
        """One sentence per measured candidate (the experiment page's and Compare's cards)."""
        collapsed: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for row in self.rows:
            accept = self.collapsed(row)
            if accept is not None:
                collapsed[row.candidate].append((row.concurrency, accept))
        return verdict_cards(
            self.rows,
            baseline=self.baseline,
            candidates=self.candidates,
            passes_per_launch=self.passes_per_launch,
            simulated=self.simulated,
            collapsed=collapsed,
            degenerate=self.degenerate,
        )

    def may_win(self, row: ComparisonRow) -> bool:
        """Whether the row may be named the winner anywhere (a headline, a bake-off's band, an engine's fastest): not
        simulated acceptance, not outputs that differ, not a collapsed acceptance, not a degenerate benchmark."""
        return (
            row.candidate not in self.simulated
            and row.verdict != OUTPUTS_DIFFER
            and self.collapsed(row) is None
            and self.degenerate_reason(row) is None
        )

    def winners(self) -> dict[int, Winner]:
        """At each concurrency the comparison measured: the fastest row that may win and is settled faster than the
        baseline, else the baseline, with the best contender that did not settle (its row, for what it needs)."""
        out: dict[int, Winner] = {}
        for level in sorted({row.concurrency for row in self.rows}):
            eligible = [row for row in self.rows if row.concurrency == level and self.may_win(row)]
            faster = [row for row in eligible if row.verdict == FASTER]
            if faster:
                best = max(faster, key=lambda row: row.speedup)
                out[level] = Winner(level, best.candidate, best, settled=True)
                continue
            open_rows = [row for row in eligible if row.verdict == INCONCLUSIVE and row.speedup > 1]
            contender = max(open_rows, key=lambda row: row.speedup) if open_rows else None
            out[level] = Winner(level, None, contender, settled=contender is None)
        return out

    def within_tolerance(self, row: ComparisonRow, tolerance: float) -> str:
        """Whether the candidate loses at most `tolerance` of the baseline's throughput at 95% confidence (an
        adaptive schedule against its band's static winner): MATCHES when the whole interval is at or above
        1 - tolerance, SLOWER when it is wholly below, else UNDECIDED (as with no interval)."""
        if row.ci_low is None or row.ci_high is None:
            return UNDECIDED
        if row.ci_low >= 1 - tolerance:
            return MATCHES
        if row.ci_high < 1 - tolerance:
            return SLOWER
        return UNDECIDED

    # -- the rules of the CLI gate, read by `specdash gate` from the API and shown on the pages ------------------

    def slower_gate(self, row: ComparisonRow) -> GateOutcome:
        """`slower` fails a row whose speed verdict is slower (whatever else it is); passes one that is faster, whose
        interval lies above 1, or that is within the minimum effect of the baseline with a measured spread; any
        other row is inconclusive, with what would settle it."""
        speed = row.speed_verdict or row.verdict
        said = self.said(row)
        degenerate = self.degenerate_reason(row)
        if degenerate is not None:
            # FAILED, not inconclusive: a degenerate benchmark is a defect to fix (the benchmark's, or the draft's when
            # only the candidate loops), never noise that more runs settle; and CI jobs commonly pass
            # --allow-inconclusive, which would turn a looping arm that "ran fastest" into a green build.
            return GateOutcome(FAILED, f"degenerate benchmark: {degenerate} ({said})")
        if speed == SLOWER:
            return GateOutcome(FAILED, f"slower than the baseline: {said}")
        if speed == FASTER:
            return GateOutcome(PASSED, f"faster: {said}")
        if row.ci_low is not None and row.ci_low > 1:
            return GateOutcome(PASSED, f"not slower (its interval lies above 1): {said}")
        if self.launches(row) is None and min(row.baseline_n, row.candidate_n) >= 2:
            return GateOutcome(PASSED, f"not slower (within the minimum effect of the baseline): {said}")
        return GateOutcome(INCONCLUSIVE, f"inconclusive: {said}; it {self.needs(row)}")

    def outputs_gate(self, candidate: str) -> GateOutcome:
        """`outputs-differ` fails a candidate whose outputs differ, passes one whose outputs were compared and
        match; otherwise it cannot judge, and says why."""
        if candidate in self.outputs_differ:
            return GateOutcome(FAILED, "outputs differ from the baseline's at temperature 0")
        for name, whose in ((self.baseline, "the baseline's"), (candidate, "its")):
            if name in self.degenerate:  # FAILED for the reason slower_gate gives
                return GateOutcome(
                    FAILED, f"degenerate benchmark: {whose} runs are degenerate: {self.degenerate[name]}"
                )
        if candidate in self.outputs_match:
            return GateOutcome(PASSED, "outputs match the baseline's at temperature 0")
        return GateOutcome(INCONCLUSIVE, self.outputs_unjudged or "no outputs compared with the baseline's")


def judge(
    samples: Iterable[Sample],
    *,
    baseline: str,
    candidates: Sequence[str],
    passes_per_launch: int,
    outputs_differ: Collection[str] = (),
    outputs_match: Collection[str] = (),
    outputs_unjudged: str = "",
    simulated: Collection[str] = (),
    speculative: Collection[str] | None = None,
    degenerate: Mapping[str, str] | None = None,
) -> Comparison:
    """The Comparison of `candidates` against `baseline` over `samples` (unusable ones are left out by
    `compare_configs`). A simulated candidate is never gated on its outputs. `speculative` names the candidates whose
    accept length can collapse (all, when None). `degenerate` gives, per config (the baseline too), why its runs measure
    a degenerate benchmark (`degenerate.config_reasons`); simulated candidates are exempt, as from the output gate."""
    samples = list(samples)
    simulated_set = frozenset(simulated)
    differ = frozenset(outputs_differ) - simulated_set
    rows = compare_configs(samples, baseline=baseline, candidates=candidates, outputs_differ=differ)
    drafting = set(candidates) if speculative is None else set(speculative)
    accepts: dict[tuple[str, int], list[float]] = defaultdict(list)
    for s in samples:
        accept = s.accept_length
        if s.config in drafting and is_usable(s.output_throughput) and accept is not None and accept > 0:
            accepts[s.config, s.concurrency].append(accept)
    return Comparison(
        baseline=baseline,
        candidates=tuple(candidates),
        rows=tuple(rows),
        passes_per_launch=max(1, passes_per_launch),
        simulated=simulated_set,
        outputs_differ=differ,
        outputs_match=frozenset(outputs_match) - differ - simulated_set,
        outputs_unjudged=outputs_unjudged,
        accept_length={key: statistics.fmean(values) for key, values in accepts.items()},
        degenerate={name: why for name, why in (degenerate or {}).items() if name not in simulated_set},
    )
