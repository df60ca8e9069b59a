"""Degenerate benchmarks in the one answer (analysis/verdicts.py) and the CLI gate: a candidate whose runs are
degenerate is shown with its reason but never the headline, the best row, a study's winner or passed by a gate; a
degenerate baseline leaves no verdict trusted."""

from __future__ import annotations

from experiments import analysis
from experiments.analysis import FASTER, Sample
from experiments.analysis.verdicts import FAILED, PASSED
from experiments.cli import gates
from experiments.tuning import plan

LOOP = "outputs loop after 40 tokens in 31 of 64 requests; acceptance 7.8 is not a property of the draft"


def _samples(**speeds: float) -> list[Sample]:
    return [Sample(name, 4, launch, 0, speed + launch) for name, speed in speeds.items() for launch in range(3)]


def _judge(degenerate: dict[str, str], **speeds: float) -> analysis.Comparison:
    names = [name for name in speeds if name != "baseline"]
    return analysis.judge(
        _samples(**speeds), baseline="baseline", candidates=names, passes_per_launch=1, degenerate=degenerate
    )


def test_a_degenerate_candidate_is_never_the_best_row_nor_passed_by_a_gate() -> None:
    comparison = _judge({"looping": LOOP}, baseline=100.0, looping=300.0, healthy=120.0)
    looping, healthy = comparison.rows

    assert looping.verdict == FASTER  # its numbers are kept and shown...
    assert comparison.best == healthy  # ...but it is not the answer
    assert comparison.headline is not None and comparison.headline.startswith("healthy serves")
    assert f"its runs are degenerate: {LOOP}" in comparison.reasons(looping)
    assert comparison.degenerate_reason(healthy) is None
    gate = comparison.slower_gate(looping)
    assert gate.outcome == FAILED and gate.message.startswith(f"degenerate benchmark: its runs are degenerate: {LOOP}")
    assert comparison.outputs_gate("looping").outcome == FAILED
    assert comparison.slower_gate(healthy).outcome == PASSED
    card = {c.candidate: c for c in comparison.cards}["looping"]
    assert card.kind == "degenerate" and LOOP in card.sentence


def test_a_headline_says_when_the_only_candidate_is_degenerate() -> None:
    comparison = _judge({"looping": LOOP}, baseline=100.0, looping=300.0)
    assert comparison.best is None
    assert comparison.headline == (
        f"No trustworthy result: looping's runs are degenerate ({LOOP}), so its speed is not a property of the draft."
    )


def test_a_degenerate_baseline_leaves_no_verdict_trusted() -> None:
    why = "prompts repeat: 1 distinct prompts among 16 requests"
    comparison = _judge({"baseline": why}, baseline=100.0, healthy=120.0)
    (row,) = comparison.rows

    assert comparison.best is None
    assert comparison.headline is not None and comparison.headline.startswith("No verdict can be trusted")
    assert why in comparison.headline
    assert comparison.slower_gate(row).outcome == FAILED
    assert comparison.outputs_gate("healthy").outcome == FAILED
    assert any("the baseline's runs are degenerate" in r for r in comparison.reasons(row))
    assert "no verdict against it can be trusted" in comparison.cards[0].sentence


def test_simulated_acceptance_is_exempt() -> None:
    comparison = analysis.judge(
        _samples(baseline=100.0, sim=200.0),
        baseline="baseline",
        candidates=["sim"],
        passes_per_launch=1,
        simulated=["sim"],
        degenerate={"sim": LOOP},
    )
    assert comparison.degenerate == {}


def test_a_study_never_races_a_degenerate_config() -> None:
    history = plan.History()
    history.add(plan.BASELINE, {4: 100.0})
    history.add("looping", {4: 300.0})
    history.add("healthy", {4: 120.0})
    history.degenerate = {"looping": LOOP}
    assert set(history.at(4)) == {plan.BASELINE, "healthy"}


def test_the_cli_fails_every_gate_on_a_degenerate_config() -> None:
    experiment = {
        "id": 7, "status": "finished", "baseline": "baseline", "candidates": ["eagle3"], "runs": [], "comparison": [],
        "equivalence": {}, "outputs_gate": {}, "flags": [], "suspicions": [], "accept_length": {},
        "degenerate": {"eagle3": LOOP, "baseline": "prompts repeat"},
    }  # fmt: skip
    checks = gates.evaluate(experiment, [gates.Gate("regression")])
    flagged = [(c.gate, c.candidate, c.outcome, c.message) for c in checks if c.gate == "degenerate"]
    assert flagged == [
        ("degenerate", "eagle3", gates.FAILED, f"its runs are degenerate: {LOOP}"),
        ("degenerate", "baseline", gates.FAILED, "the baseline's runs are degenerate: prompts repeat"),
    ]
    assert gates.exit_code(checks, allow_inconclusive=True) == 1
    # A server that predates the key: nothing to read, nothing failed.
    del experiment["degenerate"]
    assert not [c for c in gates.evaluate(experiment, [gates.Gate("regression")]) if c.gate == "degenerate"]
