"""The bake-off: methods side by side per concurrency, every cell and winner the one comparison's, with what each
method costs besides time, on its page and in the API."""

from __future__ import annotations

import pytest

from experiments.analysis import bakeoff, judge
from experiments.analysis.comparison import FASTER, INCONCLUSIVE, Sample
from experiments.analysis.verdicts import PASSED, GateOutcome
from experiments.models import Run

from .factories import MODELS, make_config, make_eagle_config, make_experiment, make_measurement, make_run

# tok/s per launch: the baseline, EAGLE3 (fast at c=1, no gain at c=16), NGRAM (slower at c=1, ahead at c=16), and
# a second NGRAM config that is slower everywhere (its method's line shows the faster one).
SPEEDS = {
    "base": {1: [100, 101, 99, 100], 16: [800, 805, 795, 800]},
    "eagle": {1: [180, 182, 178, 181], 16: [790, 812, 795, 805]},
    "ngram-a": {1: [120, 121, 119, 120], 16: [960, 965, 955, 962]},
    "ngram-b": {1: [105, 106, 104, 105], 16: [820, 825, 815, 822]},
}
METHODS = {
    "eagle": bakeoff.Method("EAGLE3", "SGLang"),
    "ngram-a": bakeoff.Method("NGRAM", "SGLang"),
    "ngram-b": bakeoff.Method("NGRAM", "SGLang"),
}


def _comparison(outputs_differ: tuple[str, ...] = ()):
    samples = [
        Sample(name, level, launch, 0, value)
        for name, levels in SPEEDS.items()
        for level, values in levels.items()
        for launch, value in enumerate(values)
    ]
    return judge(samples, baseline="base", candidates=list(METHODS), passes_per_launch=1, outputs_differ=outputs_differ)


def _build(comparison, costs=None):
    return bakeoff.build(
        comparison.rows,
        baseline="base",
        winners=comparison.winners(),
        methods=METHODS,
        costs=costs or {},
        reasons=comparison.reasons,
        gate=comparison.outputs_gate,
        may_win=comparison.may_win,
    )


def test_each_method_line_shows_its_best_candidate_and_the_winner_changes_with_the_band() -> None:
    comparison = _comparison()
    view = _build(comparison)

    lines = {line.method.label: line for line in view.lines}
    assert set(lines) == {"EAGLE3 · SGLang", "NGRAM · SGLang"}
    ngram = lines["NGRAM · SGLang"]
    assert ngram.candidates == ("ngram-a", "ngram-b")
    # Every cell is the comparison's own row, never a copy with other numbers.
    for line in view.lines:
        for cell in line.cells.values():
            assert cell.row in comparison.rows and cell.said == comparison.said(cell.row)
    assert ngram.cells[1].candidate == "ngram-a" and ngram.cells[16].candidate == "ngram-a"
    assert lines["EAGLE3 · SGLang"].cells[1].wins and lines["EAGLE3 · SGLang"].cells[1].row.verdict == FASTER
    assert lines["EAGLE3 · SGLang"].cells[16].row.verdict == INCONCLUSIVE
    assert ngram.cells[16].wins and not ngram.cells[1].wins
    assert [(b.label, b.method.label if b.method else None) for b in view.bands] == [
        ("c = 1", "EAGLE3 · SGLang"),
        ("c = 16", "NGRAM · SGLang"),
    ]
    winners = comparison.winners()
    assert winners[1].candidate == "eagle" and winners[16].candidate == "ngram-a"
    assert view.headline is not None
    assert view.headline.startswith("Best method by concurrency: c = 1: EAGLE3 · SGLang, eagle 1.")
    assert "c = 16: NGRAM · SGLang, ngram-a" in view.headline


def test_a_method_whose_outputs_differ_never_wins_and_its_cell_says_why() -> None:
    comparison = _comparison(outputs_differ=("eagle",))
    view = _build(comparison)

    eagle = next(line for line in view.lines if line.method.algorithm == "EAGLE3")
    assert not eagle.cells[1].wins and "its outputs differ" in " ".join(eagle.cells[1].reasons)
    assert eagle.cells[1].gate.outcome == "failed"
    # At c=1 NGRAM-a is the fastest that may win, settled faster: the band goes to it, not to the faster liar.
    assert comparison.winners()[1].candidate == "ngram-a"
    assert [b.method.label if b.method else None for b in view.bands] == ["NGRAM · SGLang"]
    assert view.bands[0].label == "1 <= c <= 16"


def test_where_nothing_is_settled_faster_the_baseline_wins_and_the_open_contender_is_named() -> None:
    samples = [Sample("base", 1, i, 0, v) for i, v in enumerate([100, 110, 90])]
    samples += [Sample("eagle", 1, i, 0, v) for i, v in enumerate([104, 120, 92])]
    comparison = judge(samples, baseline="base", candidates=["eagle"], passes_per_launch=1)
    view = bakeoff.build(
        comparison.rows,
        baseline="base",
        winners=comparison.winners(),
        methods={"eagle": METHODS["eagle"]},
        costs={},
        reasons=comparison.reasons,
        gate=lambda name: GateOutcome(PASSED, "outputs match"),
        may_win=comparison.may_win,
    )
    assert view.bands[0].method is None
    assert view.headline is not None and view.headline.startswith("Best method by concurrency: c = 1: no speculation")
    assert "(not settled: eagle at c = 1" in view.headline


def test_the_kv_tokens_a_method_gives_up_are_its_fewest_against_the_baselines_pool() -> None:
    costs = {
        "base": bakeoff.Costs(kv_tokens=1_000_000),
        "eagle": bakeoff.Costs(kv_tokens=950_000, draft_weights_gib=0.9),
        "ngram-a": bakeoff.Costs(kv_tokens=1_000_000),
        "ngram-b": bakeoff.Costs(kv_tokens=990_000),
    }
    view = _build(_comparison(), costs)
    lines = {line.method.algorithm: line for line in view.lines}
    assert lines["EAGLE3"].kv_tokens_given_up == 50_000 and lines["EAGLE3"].kv_share_given_up == pytest.approx(0.05)
    assert lines["EAGLE3"].cost_text == (
        "drafter weights 0.90 GiB per GPU; 50,000 fewer KV-cache tokens than the baseline (5% of its pool)"
    )
    assert lines["NGRAM"].kv_tokens_given_up == 10_000  # its fewest, over both its configs
    assert _build(_comparison()).lines[0].cost_text == "not logged"


@pytest.mark.django_db
def test_the_page_and_the_api_show_the_experiments_comparison_grouped_by_method_with_the_logged_costs(owner, client):
    base = make_config(name="base")
    eagle = make_eagle_config(name="eagle")
    ngram = make_config(name="ngram-a", speculative_algorithm="NGRAM", speculative_num_draft_tokens=8)
    vllm = make_config(
        name="vllm-eagle3",
        engine="vllm",
        speculative_algorithm="eagle3",
        speculative_draft_model_path=f"{MODELS}/kimi-k2.5-sim-eagle3",
        speculative_num_steps=2,
    )
    experiment = make_experiment(baseline=base, candidates=[eagle, ngram, vllm], with_runs=False)
    logged = {
        "base": {"limits": {"max_total_num_tokens": 1_000_000}, "weights_gib": {"target": 60.0}},
        "eagle": {"limits": {"max_total_num_tokens": 940_000}, "weights_gib": {"target": 60.0, "draft": 0.9}},
        "ngram-a": {"limits": {"max_total_num_tokens": 1_000_000}, "weights_gib": {"target": 60.0}},
        "vllm-eagle3": {"limits": {"max_total_num_tokens": 930_000}, "weights_gib": {"all": 61.25}},
    }
    speeds = {"base": (100, 800), "eagle": (180, 790), "ngram-a": (120, 960), "vllm-eagle3": (170, 700)}
    for launch in range(3):
        for config in (base, eagle, ngram, vllm):
            run = make_run(
                experiment=experiment,
                config=config,
                state=Run.State.SUCCEEDED,
                live_facts={"server": logged[config.name]},
            )
            low, high = speeds[config.name]
            make_measurement(run, concurrency=1, output_throughput=low + launch)
            make_measurement(run, concurrency=16, output_throughput=high + 2 * launch)
    client.force_login(owner)

    data = client.get(f"/api/experiments/{experiment.pk}/bakeoff").json()
    report = client.get(f"/api/experiments/{experiment.pk}").json()
    by_label = {m["label"]: m for m in data["methods"]}
    assert set(by_label) == {"EAGLE3 · SGLang", "NGRAM · SGLang", "eagle3 · vLLM"}
    assert by_label["EAGLE3 · SGLang"]["kv_tokens_given_up"] == 60_000
    assert by_label["EAGLE3 · SGLang"]["draft_weights_gib"] == 0.9
    # vLLM logs target and drafter together: its drafter is what it loaded beyond the baseline's target.
    assert by_label["eagle3 · vLLM"]["draft_weights_gib"] == pytest.approx(1.25)
    # One answer: every cell's figures are the experiment's own comparison rows.
    rows = {(r["candidate"], r["concurrency"]): r for r in report["comparison"]}
    for method in data["methods"]:
        for cell in method["cells"]:
            row = rows[cell["candidate"], cell["concurrency"]]
            assert (cell["speedup"], cell["ci_low"], cell["ci_high"], cell["verdict"]) == (
                row["speedup"], row["ci_low"], row["ci_high"], row["verdict"]
            )  # fmt: skip
    assert [(b["label"], b["method"]) for b in data["bands"]] == [
        ("c = 1", "EAGLE3 · SGLang"),
        ("c = 16", "NGRAM · SGLang"),
    ]

    page = client.get(f"/experiments/{experiment.pk}/bakeoff/")
    text = page.content.decode()
    assert page.status_code == 200 and data["headline"] in text.replace("&#x27;", "'")
    assert "60,000 fewer KV-cache tokens than the baseline (6% of its pool)" in text


def test_a_method_whose_benchmark_is_degenerate_never_wins_and_its_cell_says_why() -> None:
    samples = [
        Sample(name, level, launch, 0, value)
        for name, levels in SPEEDS.items()
        for level, values in levels.items()
        for launch, value in enumerate(values)
    ]
    loop = "outputs loop after 40 tokens in 31 of 64 requests"
    comparison = judge(
        samples, baseline="base", candidates=list(METHODS), passes_per_launch=1, degenerate={"eagle": loop}
    )
    view = _build(comparison)

    eagle = next(line for line in view.lines if line.method.algorithm == "EAGLE3")
    assert not eagle.cells[1].wins and any(loop in reason for reason in eagle.cells[1].reasons)
    assert comparison.winners()[1].candidate == "ngram-a"
