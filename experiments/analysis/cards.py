"""The verdict card of a candidate: its comparison rows (`compare_configs`, the same rows the verdict table shows) in
one sentence that claims no more than the statistics do, and the launches that would settle its open cells.

- A cell is "faster" or "slower" only where its verdict says so; an inconclusive cell is said to be inconclusive,
  never to pay or to stop paying.
- The launches come from `launches_to_settle`, the function the verdict table and Compare read: one launch queues
  every config once, so the card asks for the most any of its open cells needs.
- `settled_break_even` marks a break-even only where the speedup crosses 1 between two neighbouring conclusive
  cells (faster, then slower); anywhere else the crossing is not known.
"""

import dataclasses
import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .comparison import FASTER, INCONCLUSIVE, SLOWER, ComparisonRow, launches_to_settle
from .equivalence import OUTPUTS_DIFFER
from .intervals import ratio_text

# A card's kind when its candidate's runs measure a degenerate benchmark (analysis/degenerate.py).
DEGENERATE = "degenerate"
# The smallest effect `compare_configs` calls faster or slower (its default).
MIN_EFFECT = 0.02


@dataclass(frozen=True)
class VerdictCard:
    candidate: str
    sentence: str
    # The card's overall kind, for its colour: faster, slower, inconclusive, mixed, outputs differ or degenerate.
    kind: str
    # More launches of every config that would likely settle the inconclusive cells; None when none would.
    launches: int | None
    # Its accept length is simulated (SGLANG_SIMULATE_ACC_LEN): a speed it would have, never a result to deploy.
    simulated: bool = False


def verdict_cards(
    rows: Sequence[ComparisonRow],
    *,
    baseline: str,
    candidates: Sequence[str],
    passes_per_launch: int,
    simulated: Collection[str] = (),
    collapsed: Mapping[str, Sequence[tuple[int, float]]] | None = None,
    degenerate: Mapping[str, str] | None = None,
) -> list[VerdictCard]:
    """One card per measured candidate, in candidate order; the baseline is never a candidate of its own. Those in
    `simulated` are marked so (their acceptance was set, not measured); `collapsed` gives, per candidate, the
    (concurrency, accept length) of the cells where its acceptance collapsed, which its sentence says; `degenerate`
    why a candidate's runs (or the baseline's) measure a degenerate benchmark (analysis/degenerate.py), which replaces
    its verdict (and, the baseline's, every card's trust)."""
    cards = []
    reasons = degenerate or {}
    for name in candidates:
        own = sorted((row for row in rows if row.candidate == name), key=lambda row: row.concurrency)
        if name != baseline and own:
            card = _card(name, own, passes_per_launch)
            if name in reasons:
                best = max(own, key=lambda row: row.speedup)
                sentence = (
                    f"{name}'s runs measure a degenerate benchmark, so its speed is no result: {reasons[name]} "
                    f"(it ran {ratio(best)} at c={best.concurrency})."
                )
                card = VerdictCard(name, sentence, DEGENERATE, None)
            if baseline in reasons:
                card = dataclasses.replace(
                    card,
                    sentence=card.sentence[:-1] + f"; but the baseline's runs are degenerate ({reasons[baseline]}), "
                    "so no verdict against it can be trusted.",
                )
            cells = (collapsed or {}).get(name)
            if cells:
                card = dataclasses.replace(card, sentence=card.sentence[:-1] + _collapse_clause(cells, own))
            cards.append(dataclasses.replace(card, simulated=True) if name in simulated else card)
    return cards


def settled_break_even(rows: Sequence[ComparisonRow], candidate: str) -> int | None:
    """The lowest concurrency where `candidate` is slower right after a level where it is faster (both verdicts
    conclusive); None where the rows show no such crossing."""
    own = sorted((row for row in rows if row.candidate == candidate), key=lambda row: row.concurrency)
    for before, after in itertools.pairwise(own):
        if before.verdict == FASTER and after.verdict == SLOWER:
            return after.concurrency
    return None


def settled_break_evens(rows: Sequence[ComparisonRow], candidates: Iterable[str]) -> dict[str, int]:
    """`settled_break_even` of each of `candidates` that has one."""
    found = {name: settled_break_even(rows, name) for name in candidates}
    return {name: level for name, level in found.items() if level is not None}


def _card(name: str, rows: list[ComparisonRow], passes: int) -> VerdictCard:
    levels = [row.concurrency for row in rows]
    if any(row.verdict == OUTPUTS_DIFFER for row in rows):
        best = max(rows, key=lambda row: row.speedup)
        sentence = (
            f"{name}'s outputs differ from the baseline's at temperature 0, so its speed is no win "
            f"(it ran {ratio(best)} at c={best.concurrency})."
        )
        return VerdictCard(name, sentence, OUTPUTS_DIFFER, None)
    faster = [row for row in rows if row.verdict == FASTER]
    slower = [row for row in rows if row.verdict == SLOWER]
    open_rows = [row for row in rows if row.verdict == INCONCLUSIVE]
    settleable = [row for row in open_rows if row.runs_needed is not None]
    too_few = [
        row
        for row in open_rows
        if row.runs_needed is None and min(row.baseline_n, row.candidate_n) < 2 and abs(row.speedup - 1) >= MIN_EFFECT
    ]
    within = [row for row in open_rows if row not in settleable and row not in too_few]

    clauses = []
    if faster:
        clauses.append(f"{name} is faster at {_levels(faster, levels)} ({_ratios(faster)})")
    if slower:
        subject = "slower" if faster else f"{name} is slower"
        clauses.append(f"{subject} at {_levels(slower, levels)} ({_ratios(slower)})")
    if not clauses:
        clauses.append(f"{name} is not yet faster or slower than the baseline")
    launches = None
    if settleable:
        launches = max(launches_to_settle(row, passes) or 1 for row in settleable)
        verb, pronoun = _agree(settleable)
        clauses.append(
            f"{_levels(settleable, levels)} {verb} inconclusive ({_ratios(settleable)}): about {launches} more "
            f"launch{'es' if launches != 1 else ''} would likely settle {pronoun}"
        )
    if too_few:
        verb, _ = _agree(too_few)
        clauses.append(
            f"{_levels(too_few, levels)} {verb} inconclusive with one sample a side: a second launch would measure "
            "the spread"
        )
    if within:
        verb, _ = _agree(within)
        clauses.append(
            f"{_levels(within, levels)} {verb} within 2% of the baseline ({_ratios(within)}): more runs would not "
            "make it faster or slower"
        )
    kind = FASTER if faster and not slower else SLOWER if slower and not faster else "mixed"
    if not faster and not slower:
        kind = INCONCLUSIVE
    return VerdictCard(name, "; ".join(clauses) + ".", kind, launches)


def _collapse_clause(cells: Sequence[tuple[int, float]], rows: list[ComparisonRow]) -> str:
    levels = _levels(
        [row for row in rows if row.concurrency in {level for level, _ in cells}], [r.concurrency for r in rows]
    )
    low, high = min(a for _, a in cells), max(a for _, a in cells)
    accept = f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}"
    return (
        f"; its acceptance collapsed at {levels} (accept length {accept}: the target rejected every draft token, so "
        "the draft is paid for and nothing gained)."
    )


def _agree(rows: list[ComparisonRow]) -> tuple[str, str]:
    return ("is", "it") if len(rows) == 1 else ("are", "them")


def ratio(row: ComparisonRow) -> str:
    return ratio_text(row.speedup, row.ci_low, row.ci_high)


def _ratios(rows: list[ComparisonRow]) -> str:
    if len(rows) == 1:
        return ratio(rows[0])
    low, high = min(rows, key=lambda r: r.speedup), max(rows, key=lambda r: r.speedup)
    return f"{ratio(low)} to {ratio(high)}"


def _levels(rows: list[ComparisonRow], measured: list[int]) -> str:
    """The concurrencies of `rows` as stretches of the measured levels: "c=1-2", "c=1-2 and c=16"."""
    chosen = {row.concurrency for row in rows}
    stretches: list[list[int]] = []
    previous = False
    for level in measured:
        inside = level in chosen
        if inside and previous:
            stretches[-1].append(level)
        elif inside:
            stretches.append([level])
        previous = inside
    parts = [f"{s[0]}" if len(s) == 1 else f"{s[0]}-{s[-1]}" for s in stretches]
    return "c=" + " and c=".join(parts)
