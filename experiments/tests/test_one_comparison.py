"""One comparison everywhere: the experiment page, the compare page and API, the experiments table and a study's
recommendation read the same pipeline (`analysis.compare_configs`), with one rule of a usable sample and the
output-equivalence gate. A candidate whose outputs differ is "outputs differ" on each of them, never "faster"."""

from __future__ import annotations

import math

import pytest

from experiments import analysis
from experiments.models import ApiToken, Candidate, Experiment, Measurement, Run
from experiments.tuning import plan, recommend

from .factories import make_config, make_eagle_config, make_experiment, make_profile

pytestmark = pytest.mark.django_db

FAST_BUT_WRONG = "eagle3-draft-bug"


def _finished(tok_s: dict[str, list[float]]) -> Experiment:
    experiment = make_experiment(
        name="draft bug",
        profile=make_profile(concurrency=[1], passes=3),
        baseline=make_config(name="baseline"),
        candidates=[make_eagle_config(name=FAST_BUT_WRONG)],
    )
    for run in experiment.run_set.select_related("config"):
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)
        for pass_index, value in enumerate(tok_s[run.config.name]):
            Measurement.objects.create(
                run=run, pass_index=pass_index, concurrency=1, completed=16, duration_s=10.0,
                output_throughput=value, total_throughput=2 * value, request_throughput=1.0,
            )  # fmt: skip
    # What a run's success stores when the candidate's outputs parted from the baseline's early.
    Candidate.objects.filter(experiment=experiment).update(outputs_differ=True)
    return experiment


@pytest.fixture
def draft_bug() -> Experiment:
    # 20% faster with a tight spread: "faster" by every measure of speed.
    return _finished({"baseline": [80.0, 80.5, 81.0], FAST_BUT_WRONG: [96.0, 96.5, 97.0]})


def test_the_compare_api_and_page_say_outputs_differ(client, owner, draft_bug):
    _, token = ApiToken.issue(owner)
    candidate = draft_bug.candidate_set.get().config
    picks = [f"c{draft_bug.pk}-{draft_bug.baseline_id}", f"c{draft_bug.pk}-{candidate.pk}"]

    body = client.get("/api/compare", {"pick": picks}, headers={"Authorization": f"Bearer {token}"}).json()
    client.force_login(owner)
    page = client.get("/compare/", {"pick": picks}).content.decode()

    assert [row["verdict"] for row in body["comparison"]] == [analysis.OUTPUTS_DIFFER]
    assert body["comparison"][0]["speedup"] > 1.15  # the speed is shown; it is just no win
    assert "verdict-outputs-differ" in page and "verdict-faster" not in page


def test_the_experiments_table_says_outputs_differ(client, owner, draft_bug):
    client.force_login(owner)

    content = client.get("/experiments/").content.decode()

    assert "verdict-outputs-differ" in content and "verdict-faster" not in content


def test_a_study_never_recommends_a_config_whose_outputs_differ():
    settings = plan.Settings(concurrency=(1,), max_launches=20, round_size=2)
    history = plan.History()
    for launch in range(4):
        jitter = 1 + 0.002 * launch
        history.add(plan.BASELINE, {1: 80.0 * jitter})
        history.add("s3-k1-d4", {1: 100.0 * jitter})  # fastest, but its outputs differ
        history.add("s1-k1-d2", {1: 90.0 * jitter})
    history.outputs_differ = {"s3-k1-d4"}

    (best,) = recommend.best_per_concurrency(history, settings)

    assert best.config == "s1-k1-d2" and best.speedup == pytest.approx(90 / 80, rel=0.01)


def test_it_leaves_out_a_non_finite_or_empty_pass_the_same_way_everywhere():
    samples = [analysis.Sample("base", 1, launch, 0, 80.0 + launch) for launch in range(3)]
    samples += [analysis.Sample("cand", 1, launch, 0, 96.0 + launch) for launch in range(3)]
    unusable = [analysis.Sample("cand", 1, 3, 0, value) for value in (math.nan, math.inf, 0.0, -1.0)]

    clean = analysis.compare_configs(samples, baseline="base", candidates=["cand"])
    with_unusable = analysis.compare_configs(samples + unusable, baseline="base", candidates=["cand"])

    assert with_unusable == clean and clean[0].verdict == analysis.FASTER and clean[0].candidate_n == 3


def test_the_experiment_page_leads_with_the_same_answer_as_the_table(client, owner):
    honest = _finished({"baseline": [80.0, 80.5, 81.0], FAST_BUT_WRONG: [96.0, 96.5, 97.0]})
    Candidate.objects.filter(experiment=honest).update(outputs_differ=False)
    client.force_login(owner)

    page = client.get(honest.get_absolute_url()).content.decode()
    headline = page[page.index('id="headline"') :].split("</p>")[0]

    assert f"{FAST_BUT_WRONG} serves 1.20x [" in headline and "at concurrency 1: faster." in headline
    assert page.index('id="headline"') < page.index('id="runs-card"')  # the answer before the details


def test_the_headline_never_calls_a_candidate_whose_outputs_differ_faster():
    samples = [analysis.Sample("base", 1, launch, 0, 80.0 + launch) for launch in range(3)]
    samples += [analysis.Sample("cand", 1, launch, 0, 96.0 + launch) for launch in range(3)]

    judged = analysis.judge(samples, baseline="base", candidates=["cand"], passes_per_launch=1, outputs_differ=["cand"])
    sentence = judged.headline

    assert sentence is not None and "outputs differ" in sentence and "faster" not in sentence
    assert analysis.judge([], baseline="base", candidates=["cand"], passes_per_launch=1).headline is None
