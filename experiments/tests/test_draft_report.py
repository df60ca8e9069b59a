"""The draft's report card: per draft checkpoint what it serves against what its training said, the checkpoint to
ship read from the one comparison, the silently broken one called out, on its page and in the API."""

from __future__ import annotations

import random

import pytest

from experiments.analysis import draft_report, judge
from experiments.analysis.comparison import Sample

TRAINED = "/models/sf"
# tok/s per launch at c = 1 and c = 8.
SPEEDS = {
    "base": {1: [100, 101, 99, 100], 8: [600, 605, 595, 600]},
    "sf-step2000-s3": {1: [128, 130, 129, 127], 8: [640, 650, 645, 642]},
    "sf-step4000-s3": {1: [150, 152, 149, 151], 8: [700, 706, 698, 702]},
    "sf-step4000-s2": {1: [140, 141, 139, 140], 8: [690, 692, 688, 690]},
    "sf-step5000-s3": {1: [90, 91, 89, 90], 8: [560, 562, 558, 560]},
    "other-s3": {1: [110, 111, 109, 110], 8: [610, 612, 608, 611]},
}


def _training_json() -> list[dict]:
    """The host's answer as `training_directory_json` gives it: steps 2000, 4000 (best) and 5000 (latest) exported."""
    checkpoints = []
    for step, acc in ((1000, 0.434), (2000, 0.5456), (4000, 0.6448), (5000, 0.6386)):
        exported = step != 1000
        checkpoints.append(
            {
                "step": step,
                "is_latest": step == 5000,
                "is_best": step == 4000,
                "exported": exported,
                "draft_paths": [f"{TRAINED}-step{step}-sglang/"] if exported else [],  # a trailing slash as written
                "metrics": {"eval/per_position_acc": [acc] * 3, "eval/simulated_acc_len": acc + acc**2 + acc**3},
                "simulated_acc_len": acc + acc**2 + acc**3,
                "served_definition": 1 + acc + acc**2 + acc**3,
            }
        )
    return [{"path": "/train", "runs": [{"run_id": "sf", "checkpoints": checkpoints}], "refusal": None}]


def _requests(mean: float, n: int = 40) -> dict[str, list[float]]:
    rng = random.Random(int(mean * 1000))
    # Every draft token rejected is exactly 1.0 per request (the bonus token alone).
    values = [mean + rng.uniform(-0.1, 0.1) if mean > 1 else 1.0 for _ in range(n)]
    return {"chat": values[: n // 2], "code": values[n // 2 :]}


SERVED = {
    "sf-step2000-s3": 2.01,
    "sf-step4000-s3": 2.33,
    "sf-step4000-s2": 2.06,
    "sf-step5000-s3": 1.0,
    "other-s3": 1.5,
}


def _candidates() -> list[draft_report.DraftCandidate]:
    out = []
    for name in SERVED:
        steps = 2 if name.endswith("s2") else 3
        path = "/models/other-draft" if name.startswith("other") else f"{TRAINED}-{name.rsplit('-', 1)[0][3:]}-sglang"
        served = {1: SERVED[name], 8: SERVED[name]}
        out.append(
            draft_report.DraftCandidate(
                name, path, "EAGLE3", steps, 1, steps + 1, _requests(SERVED[name]), (1,), served
            )
        )
    return out


def _comparison(**gates):
    samples = [
        Sample(name, level, launch, 0, value, SERVED.get(name))
        for name, levels in SPEEDS.items()
        for level, values in levels.items()
        for launch, value in enumerate(values)
    ]
    return judge(samples, baseline="base", candidates=list(SERVED), passes_per_launch=1, **gates)


def _build(comparison, training=None, **extra):
    return draft_report.build(
        _candidates(),
        draft_report.training_checkpoints(_training_json() if training is None else training),
        rows=comparison.rows,
        winners=comparison.winners(),
        may_win=comparison.may_win,
        reasons=comparison.reasons,
        **extra,
    )


def test_it_ships_the_checkpoint_the_comparison_makes_the_winner_beside_its_training_figure() -> None:
    comparison = _comparison()
    report = _build(comparison)

    labels = [card.label for card in report.checkpoints]
    assert labels == ["step2000", "step4000", "step5000", "other-draft"]
    step4000 = report.checkpoints[1]
    assert [c.candidate.name for c in step4000.candidates] == ["sf-step4000-s3", "sf-step4000-s2"]
    winner = comparison.winners()[1]
    assert winner.candidate == "sf-step4000-s3" and step4000.wins_at == (1, 8)
    quoted = step4000.candidates[0]
    # Training on the served definition at the candidate's depth: 1 + p + p^2 + p^3 at 3 steps, 1 + p + p^2 at 2.
    p = 0.6448
    assert quoted.training == pytest.approx(1 + p + p**2 + p**3)
    assert step4000.candidates[1].training == pytest.approx(1 + p + p**2)
    assert report.answer is not None and report.answer.startswith(
        f"Ship step4000: served accept length {quoted.served:.2f} against {quoted.training:.2f} in training, "
        f"{comparison.said(winner.row)} at c = 1"
    )
    # Every cell is the comparison's own row.
    for card in report.checkpoints:
        for candidate in card.candidates:
            for cell in candidate.cells.values():
                assert cell.row in comparison.rows and cell.said == comparison.said(cell.row)
    assert step4000.candidates[0].by_category.keys() == {"chat", "code"}


def test_a_checkpoint_that_serves_far_below_its_training_is_called_out_with_the_likely_causes() -> None:
    report = _build(_comparison())
    cards = {card.label: card for card in report.checkpoints}
    assert cards["step5000"].callout == (
        f"step5000 serves accept length 1.00 against {1 + 0.6386 + 0.6386**2 + 0.6386**3:.2f} in training: likely "
        f"causes — {draft_report.LIKELY_CAUSES}."
    )
    assert "the serving loader skipped its weights" in report.callouts[0] and len(report.callouts) == 1
    # Close to its training figure, or without one: never called out.
    assert cards["step2000"].callout is None and cards["step4000"].callout is None
    assert cards["other-draft"].callout is None
    # Training stopped helping at step 4000: step 5000 serves less.
    assert report.plateau is not None and report.plateau.startswith("Training stopped helping after step4000")


def test_the_rule_counts_the_served_figures_interval_and_a_figure_just_above_it_is_not_flagged() -> None:
    trained = draft_report.training_checkpoints(_training_json())[3]  # step 5000: 2.31 on the served definition
    figure, _ = trained.accept_length(3)
    assert figure is not None
    just_above = draft_report.CandidateCard(_candidates()[0], 0.76 * figure, None, None, 1, {}, figure, "", {})
    within_interval = draft_report.CandidateCard(
        _candidates()[0], 0.70 * figure, 0.60 * figure, 0.80 * figure, 40, {}, figure, "", {}
    )
    below = draft_report.CandidateCard(
        _candidates()[0], 0.70 * figure, 0.69 * figure, 0.71 * figure, 40, {}, figure, "", {}
    )
    assert not just_above.far_below and not within_interval.far_below and below.far_below


def test_the_winner_comes_from_the_comparison_never_from_a_gated_candidates_higher_speedup() -> None:
    # step 2000 is made the fastest by far, but its outputs differ from the baseline's: the comparison gates it out.
    SPEEDS["sf-step2000-s3"] = {1: [300, 301, 299, 300], 8: [900, 905, 895, 900]}
    try:
        comparison = _comparison(outputs_differ=["sf-step2000-s3"])
        report = _build(comparison)
    finally:
        SPEEDS["sf-step2000-s3"] = {1: [128, 130, 129, 127], 8: [640, 650, 645, 642]}
    step2000 = report.checkpoints[0]
    assert step2000.best[1].row.speedup > report.checkpoints[1].best[1].row.speedup
    assert not step2000.best[1].wins and not step2000.best[1].may_win
    assert any("outputs differ" in reason for reason in step2000.best[1].reasons)
    assert report.answer is not None and report.answer.startswith("Ship step4000:")


def test_a_draft_outside_any_training_directory_is_shown_as_such_and_without_training_the_served_figures_stand() -> (
    None
):
    report = _build(_comparison())
    other = report.checkpoints[-1]
    assert other.training is None and other.provenance == draft_report.NOT_FROM_TRAINING
    assert other.candidates[0].training is None and other.candidates[0].served == pytest.approx(1.5, abs=0.1)

    alone = _build(_comparison(), training=[], training_note="the host could not be reached")
    assert alone.training_note == "the host could not be reached"
    assert all(card.training is None for card in alone.checkpoints) and alone.callouts == []
    assert alone.answer is not None and alone.answer.startswith("Ship sf-step4000-sglang: served accept length 2.3")
    assert "in training" not in alone.answer


def test_no_checkpoint_is_shipped_when_none_is_settled_faster() -> None:
    samples = [Sample("base", 1, i, 0, v) for i, v in enumerate([100, 110, 90])]
    samples += [Sample("sf-step4000-s3", 1, i, 0, v, 2.3) for i, v in enumerate([104, 120, 92])]
    comparison = judge(samples, baseline="base", candidates=["sf-step4000-s3"], passes_per_launch=1)
    report = draft_report.build(
        [c for c in _candidates() if c.name == "sf-step4000-s3"],
        draft_report.training_checkpoints(_training_json()),
        rows=comparison.rows,
        winners=comparison.winners(),
        may_win=comparison.may_win,
        reasons=comparison.reasons,
    )
    assert report.answer is not None and report.answer.startswith(
        "No checkpoint to ship yet: none is settled faster than the baseline; the closest, step4000 (sf-step4000-s3)"
    )


def test_a_collapsed_checkpoint_is_never_shipped_even_when_faster() -> None:
    SPEEDS["sf-step5000-s3"] = {1: [400, 401, 399, 400], 8: [900, 901, 899, 900]}
    try:
        comparison = _comparison()
    finally:
        SPEEDS["sf-step5000-s3"] = {1: [90, 91, 89, 90], 8: [560, 562, 558, 560]}
    report = _build(comparison)
    assert comparison.collapsed(next(r for r in comparison.rows if r.candidate == "sf-step5000-s3")) == 1.0
    assert report.answer is not None and report.answer.startswith("Ship step4000:")


def test_the_training_listing_is_checked_not_trusted() -> None:
    odd = [
        {"path": "/t", "runs": [{"run_id": "r", "checkpoints": [
            {"step": "12", "draft_paths": ["/a"]},
            {"step": True, "draft_paths": ["/b"]},
            {"step": 7, "draft_paths": "/c", "simulated_acc_len": "1.2", "metrics": {"eval/per_position_acc": ["x"]}},
        ]}]},
        "not a directory",
        {"runs": "nope"},
    ]  # fmt: skip
    checkpoints = draft_report.training_checkpoints(odd)
    assert [(c.step, c.draft_paths, c.simulated_acc_len, c.per_position_acc) for c in checkpoints] == [
        (7, (), None, ())
    ]
    assert checkpoints[0].accept_length(3) == (None, "no eval/simulated_acc_len recorded")
