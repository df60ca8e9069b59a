"""A draft's report card (pure): per draft checkpoint of an experiment or a study, what it serves against what its
training said, and which checkpoint to ship.

A draft checkpoint is a distinct `speculative_draft_model_path` among the speculative candidates (its candidates are
the configs that serve it: the same draft at 2 and 3 steps). It is matched to a training checkpoint of the host's
training directories (`serializers.draft_checkpoints.training_directory_json`) where one of that checkpoint's
`draft_paths` is the same path, trailing slashes aside; else it is "not from a known training directory".

Served accept length is taken on SpecForge's definition: every request weighing the same, the bonus token counted
(the unweighted mean of per-request accept lengths, `mean_request_accept_length`'s definition). Per concurrency it is
the mean of that cell figure over the cells; overall and per prompt category it is the mean over the requests of the
first cell of each succeeded run (`PromptResults`), with its 95% interval.

The training figure on the same definition is 1 + Σ_{k ≤ d} Π_{i ≤ k} acc_i over the candidate's draft depth d (its
speculative steps) where the per-position accuracies (`eval/per_position_acc`) are known: SpecForge's
`eval/simulated_acc_len` is that sum over every trained position without the bonus token, so a draft served at fewer
steps than it was trained for is compared with the positions it drafts. Without per-position accuracies it is
`eval/simulated_acc_len` + 1 as recorded. SpecForge simulates a chain: a tree (topk > 1) serves more than it.

Every speedup and verdict is a row of the one comparison (an experiment's `verdicts.Comparison`, a study's
recommendation rows), and the checkpoint to ship is the one whose candidate the comparison's winners name: never a
candidate the comparison gates out (`may_win`: outputs differ, degenerate, collapsed).

The rule that calls a checkpoint out (FAR_BELOW): a candidate whose served accept length, plus the half-width of its
95% interval, is below FAR_BELOW x its training figure at its depth. One request (no interval) counts as is.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .comparison import FASTER, ComparisonRow
from .draft_training import TrainingCheckpoint
from .intervals import mean_interval, ratio_text
from .verdicts import Winner

FAR_BELOW = 0.75
NOT_FROM_TRAINING = "not from a known training directory"
LIKELY_CAUSES = (
    "the serving loader skipped its weights (an export that kept the trainer's key prefix; SpecForge's exporter warns "
    "a key the loader does not expect is skipped without an error), a vocab mapping mismatch (d2t/t2d), or the wrong "
    "algorithm (an EAGLE-3 head served as EAGLE)"
)


def normalised(path: str) -> str:
    """A draft path as matched: trailing slashes aside (a server resolves `/a/b/` and `/a/b` to one directory)."""
    return path.rstrip("/") or path


@dataclass(frozen=True)
class DraftCandidate:
    """A speculative candidate as served: its config's draft and shape, and what its succeeded runs measured."""

    name: str
    draft_path: str
    algorithm: str
    steps: int | None
    topk: int | None
    draft_tokens: int | None
    # Per-request accept lengths of the first cell of each succeeded run, by prompt category ("" when none).
    requests: Mapping[str, Sequence[float]] = field(default_factory=dict)
    first_cells: tuple[int, ...] = ()  # the concurrency of those first cells
    # Per concurrency: the mean over its cells of each cell's mean of per-request accept lengths.
    by_concurrency: Mapping[int, float] = field(default_factory=dict)
    # Per concurrency: the served share of verify steps accepting at least j drafts (report's `positions`).
    positions: Mapping[int, Sequence[float]] = field(default_factory=dict)

    @property
    def shape(self) -> str:
        parts = [self.algorithm]
        for label, value in (("steps", self.steps), ("topk", self.topk), ("draft tokens", self.draft_tokens)):
            if value is not None:
                parts.append(f"{label} {value}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Cell:
    concurrency: int
    candidate: str
    row: ComparisonRow
    said: str
    reasons: tuple[str, ...]
    may_win: bool
    wins: bool


@dataclass(frozen=True)
class CandidateCard:
    candidate: DraftCandidate
    served: float | None  # the unweighted mean of per-request accept lengths of its first cells
    served_low: float | None
    served_high: float | None
    requests: int
    by_category: dict[str, float]
    training: float | None  # the training figure at its depth, served definition
    training_note: str
    cells: dict[int, Cell]

    @property
    def far_below(self) -> bool:
        """The callout rule (module docstring): served, with its interval's upper side, below FAR_BELOW x training."""
        if self.served is None or self.training is None:
            return False
        upper = self.served_high if self.served_high is not None else self.served
        return upper < FAR_BELOW * self.training


@dataclass(frozen=True)
class CheckpointCard:
    draft_path: str
    label: str  # "step4000" (the run id first when the card spans runs), else the draft directory's name
    training: TrainingCheckpoint | None
    candidates: tuple[CandidateCard, ...]
    best: dict[int, Cell]  # per concurrency: the winner if one of its candidates wins, else its best contender
    wins_at: tuple[int, ...]

    @property
    def step(self) -> int | None:
        return self.training.step if self.training else None

    @property
    def provenance(self) -> str:
        if self.training is None:
            return NOT_FROM_TRAINING
        t = self.training
        marks = [m for m, on in (("latest", t.is_latest), ("best in training", t.is_best)) if on]
        return f"{t.run_id} step {t.step}" + (f" ({', '.join(marks)})" if marks else "") + f", {t.directory}"

    @property
    def headline_candidate(self) -> CandidateCard | None:
        """The candidate its figures are quoted for: the winning one, else the one served with most requests."""
        for card in self.candidates:
            if any(cell.wins and cell.candidate == card.candidate.name for cell in self.best.values()):
                return card
        measured = [c for c in self.candidates if c.served is not None]
        return max(measured, key=lambda c: c.requests) if measured else None

    @property
    def flagged(self) -> CandidateCard | None:
        flagged = [c for c in self.candidates if c.far_below]
        return min(flagged, key=lambda c: (c.served or 0) / (c.training or 1)) if flagged else None

    @property
    def callout(self) -> str | None:
        card = self.flagged
        if card is None or card.served is None or card.training is None:
            return None
        return (
            f"{self.label} serves accept length {card.served:.2f} against {card.training:.2f} in training: "
            f"likely causes — {LIKELY_CAUSES}."
        )


@dataclass
class DraftReport:
    levels: list[int]
    checkpoints: list[CheckpointCard]
    answer: str | None
    plateau: str | None
    training_note: str  # why no training figures are shown ("" when the training directories were read)
    notes: list[str] = field(default_factory=list)

    @property
    def callouts(self) -> list[str]:
        return [text for card in self.checkpoints if (text := card.callout)]


def build(
    candidates: Sequence[DraftCandidate],
    training: Sequence[TrainingCheckpoint],
    *,
    rows: Sequence[ComparisonRow],
    winners: Mapping[int, Winner],
    may_win: Callable[[ComparisonRow], bool],
    reasons: Callable[[ComparisonRow], Sequence[str]],
    training_note: str = "",
) -> DraftReport:
    """The report card of `candidates` (the speculative ones with a draft path) over the comparison's `rows` and
    `winners` (an experiment's `Comparison.rows`/`winners()`, or a study's rows and recommendation) and the host's
    `training` checkpoints. `may_win` and `reasons` are the comparison's own."""
    by_path: dict[str, TrainingCheckpoint] = {}
    for checkpoint in training:
        for path in checkpoint.draft_paths:
            by_path.setdefault(normalised(path), checkpoint)
    levels = sorted({row.concurrency for row in rows} | set(winners))
    shipped = {level: w.candidate for level, w in winners.items() if w.candidate is not None}
    groups: dict[str, list[DraftCandidate]] = {}
    for candidate in candidates:
        groups.setdefault(normalised(candidate.draft_path), []).append(candidate)
    run_ids = {by_path[path].run_id for path in groups if path in by_path}
    cards = []
    for path, members in groups.items():
        trained = by_path.get(path)
        candidate_cards = tuple(_candidate_card(c, trained, rows, shipped, may_win, reasons) for c in members)
        best: dict[int, Cell] = {}
        for level in levels:
            here = [cell for card in candidate_cards if (cell := card.cells.get(level))]
            if here:
                best[level] = sorted(
                    here, key=lambda c: (not c.wins, not c.may_win, c.row.verdict != FASTER, -c.row.speedup)
                )[0]
        label = path.rsplit("/", 1)[-1]
        if trained is not None:
            label = f"step{trained.step}" if len(run_ids) == 1 else f"{trained.run_id} step{trained.step}"
        wins_at = tuple(level for level, cell in best.items() if cell.wins)
        cards.append(CheckpointCard(path, label, trained, candidate_cards, best, wins_at))
    cards.sort(key=lambda c: (c.training is None, c.training.run_id if c.training else "", c.step or 0, c.label))
    report = DraftReport(levels, cards, None, None, training_note)
    report.answer = _answer(cards, winners) if rows else None  # nothing compared yet: no answer to give
    report.plateau = _plateau(cards)
    if any(c.topk and c.topk > 1 for c in candidates) and training:
        report.notes.append("SpecForge simulates a chain of drafts: a tree (topk > 1) serves more than its figure.")
    return report


def _candidate_card(
    candidate: DraftCandidate,
    trained: TrainingCheckpoint | None,
    rows: Sequence[ComparisonRow],
    shipped: Mapping[int, str],
    may_win: Callable[[ComparisonRow], bool],
    reasons: Callable[[ComparisonRow], Sequence[str]],
) -> CandidateCard:
    every = [v for values in candidate.requests.values() for v in values]
    served, low, high = mean_interval(every) if every else (None, None, None)
    training, note = trained.accept_length(candidate.steps) if trained else (None, NOT_FROM_TRAINING)
    cells = {
        row.concurrency: Cell(
            row.concurrency,
            row.candidate,
            row,
            ratio_text(row.speedup, row.ci_low, row.ci_high),
            tuple(reasons(row)),
            may_win(row),
            shipped.get(row.concurrency) == row.candidate and may_win(row),
        )
        for row in rows
        if row.candidate == candidate.name
    }
    return CandidateCard(
        candidate,
        served,
        low,
        high,
        len(every),
        {category: sum(v) / len(v) for category, v in sorted(candidate.requests.items()) if v and category},
        training,
        note,
        cells,
    )


def _answer(cards: Sequence[CheckpointCard], winners: Mapping[int, Winner]) -> str | None:
    """The card's answer in one sentence: the checkpoint whose candidate wins at the most concurrencies (the lowest
    first on a tie), with its served and training accept length and its winning row; else why none is shipped."""
    if not cards:
        return None
    winning = [card for card in cards if card.wins_at]
    owners = {k.candidate.name: (card.label, k) for card in cards for k in card.candidates}
    if not winning:
        return _no_ship(winners, owners)
    ship = max(winning, key=lambda card: (len(card.wins_at), -card.wins_at[0]))
    cell = ship.best[ship.wins_at[0]]
    quoted = next(c for c in ship.candidates if c.candidate.name == cell.candidate)
    parts = []
    if quoted.served is not None:
        figure = f"served accept length {quoted.served:.2f}"
        if quoted.training is not None:
            figure += f" against {quoted.training:.2f} in training"
        parts.append(figure)
    parts.append(f"{cell.said} at c = {cell.concurrency}")
    sentence = f"Ship {ship.label}: " + ", ".join(parts)
    others = [f"{card.label} at c = {', '.join(map(str, card.wins_at))}" for card in winning if card is not ship]
    if others:
        sentence += f" (elsewhere the winner is {'; '.join(others)})"
    return sentence + "."


def _no_ship(winners: Mapping[int, Winner], owners: Mapping[str, tuple[str, CandidateCard]]) -> str:
    """Why no checkpoint is shipped: a winner that serves no draft here, one the comparison may not name, or no
    candidate settled faster (with the closest)."""
    for w in sorted(winners.values(), key=lambda w: w.concurrency):
        if w.candidate is not None and w.candidate not in owners:
            return (
                f"No checkpoint to ship: {w.candidate}, which serves no draft checkpoint, wins at c = {w.concurrency}."
            )
        if w.candidate is not None:
            label, gated = owners[w.candidate]
            why = "; ".join(cell.reasons) if (cell := gated.cells.get(w.concurrency)) else ""
            return (
                f"No checkpoint to ship: {label} ({w.candidate}) leads at c = {w.concurrency} but may not win: {why}."
            )
    rows = [w.row for w in winners.values() if w.row is not None and not w.settled and w.row.candidate in owners]
    if not rows:
        return "No checkpoint to ship: none serves faster than the baseline at any concurrency measured."
    row, said = rows[0], ratio_text(rows[0].speedup, rows[0].ci_low, rows[0].ci_high)
    return (
        f"No checkpoint to ship yet: none is settled faster than the baseline; the closest, {owners[row.candidate][0]} "
        f"({row.candidate}), runs {said} at c = {row.concurrency}."
    )


def _plateau(cards: Sequence[CheckpointCard]) -> str | None:
    """Where training stopped helping: within one training run and one served shape (the shape measured for the most
    checkpoints, the deepest on a tie), the last step whose served accept length beat the previous step's by more
    than its own 95% interval's half-width. None with fewer than two such checkpoints."""
    series: dict[tuple[str, str], list[tuple[int, CandidateCard]]] = {}
    for card in cards:
        if card.training is None:
            continue
        for candidate in card.candidates:
            if candidate.served is not None:
                key = (card.training.run_id, candidate.candidate.shape)
                series.setdefault(key, []).append((card.training.step, candidate))
    # Most checkpoints first; on a tie the deepest drafting (the most positions the training figure covers).
    longest = max(series.items(), key=lambda item: (len(item[1]), item[1][0][1].candidate.steps or 0), default=None)
    if longest is None or len(longest[1]) < 2:
        return None
    (_, shape), points = longest
    points.sort(key=lambda p: p[0])
    last_gain = points[0][0]
    for (_, before), (step, after) in itertools.pairwise(points):
        assert before.served is not None and after.served is not None
        half = (after.served_high - after.served) if after.served_high is not None else math.inf
        if after.served - before.served > half:
            last_gain = step
    final_step, final = points[-1]
    if last_gain == final_step:
        return (
            f"Served accept length still rose at the last step measured (step{final_step}, {final.served:.2f}; "
            f"{shape}): training may still help."
        )
    after_gain = [f"step{step} {c.served:.2f}" for step, c in points if step > last_gain]
    return (
        f"Training stopped helping after step{last_gain}: no later checkpoint served a higher accept length by more "
        f"than its interval ({', '.join(after_gain)}; {shape})."
    )
