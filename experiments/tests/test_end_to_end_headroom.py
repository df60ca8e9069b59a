"""An acceptance headroom study end to end (issue 28's "Must show"): three simulated accept lengths of an EAGLE3
config beside the config itself and the baseline, launched through the API, a Celery worker and the real sshd on
the simulated host; the chart's points and its break-even mark agree with the break-even model, whose draft and
verify times come from the real config's own log."""

from __future__ import annotations

import pytest

from experiments.analysis.explanations import MODEL_METRICS
from experiments.models import ApiToken, HeadroomStudy, Host, Run
from experiments.reads.headroom import headroom_view
from experiments.tests.waiting import until

from .factories import make_config, make_eagle_config, make_experiment, make_profile

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LENGTHS = [1.5, 2.25, 3.0]
# A short load and a simulated GPU twice as fast: every config's steps halve alike, so the ratios the model predicts
# stay as they are, in half the benchmark time.
FAST = {"SIMHOST_LOAD_SECONDS": "0.2", "SIMHOST_SPEED": "2"}


def _runs(study: HeadroomStudy) -> str:
    return "; ".join(
        f"{r.pk} {r.config.name} {r.state} {r.failure_message[:200]}"
        for r in Run.objects.filter(experiment=study.experiment).select_related("config").order_by("sequence")
    )


def test_a_headroom_study_s_chart_and_break_even_mark_match_the_break_even_model(
    client, owner, sim_host: Host, celery_worker_process
):
    models = sim_host.models_root
    real = make_eagle_config(
        name="eagle3-s2",
        model_path=f"{models}/kimi-k2.5-sim",
        speculative_draft_model_path=f"{models}/kimi-k2.5-sim-eagle3",
        tp_size=1,
        env={**FAST, "EAGLE3_PROFILE": "1"},
        log_metrics=MODEL_METRICS,
    )
    # The study's source: only its configs and profile matter here, so it is stored, never launched itself.
    source = make_experiment(
        host=sim_host,
        baseline=make_config(name="baseline", model_path=f"{models}/kimi-k2.5-sim", tp_size=1, env=FAST),
        candidates=[real],
        profile=make_profile(
            concurrency=[1, 2], num_prompts=4, input_len=32, output_len=64, warmup_requests=1, readiness_timeout_s=120
        ),
        with_runs=False,
        created_by=owner,
    )
    _, token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {token}"}

    response = client.post(
        f"/api/experiments/{source.pk}/headroom",
        {"config": real.name, "accept_lengths": LENGTHS},
        content_type="application/json",
        headers=headers,
    )

    assert response.status_code == 201, response.content
    study = HeadroomStudy.objects.get(pk=response.json()["id"])
    until(lambda: not Run.objects.filter(experiment=study.experiment).exclude(state__in=Run.TERMINAL_STATES).exists(),
          150, "the headroom study's runs ended", lambda: _runs(study))  # fmt: skip
    assert not Run.objects.filter(experiment=study.experiment).exclude(state=Run.State.SUCCEEDED).exists(), _runs(study)

    view = headroom_view(HeadroomStudy.objects.get(pk=study.pk))
    assert view.model is not None and view.model.break_even is not None, view.model
    needed = view.model.break_even.needed_accept_length  # the model's, from the logged draft and verify times
    level = view.result.level(1)
    assert level is not None and [p.accept_length for p in level.simulated] == LENGTHS, _runs(study)
    traces = {trace["name"]: trace for trace in view.figure["data"]}  # type: ignore[index]
    # The chart's points: each simulated length serves what the model predicts, accept length / needed. The model
    # leaves out what a request costs beside its cycles (its prefill, its last, partial cycle), so it is read to 12%.
    assert traces["c=1"]["x"] == LENGTHS
    for point, tok_s in zip(level.simulated, traces["c=1"]["y"], strict=True):
        assert tok_s == point.tok_s
        assert point.speedup == pytest.approx(point.accept_length / needed, rel=0.12), (needed, level.simulated)
    # Its break-even mark sits on the baseline's line where the model says speculation pays for itself.
    mark = traces["c=1 break-even"]
    assert mark["y"] == [level.baseline_tok_s] and mark["x"] == [level.break_even]
    assert level.break_even == pytest.approx(needed, rel=0.1), (level, view.model.break_even.message)
    # The real draft sits between, at its measured accept length; every concurrency has its curve.
    assert level.real is not None and 1 < level.real.accept_length < 3
    assert traces["c=1 real draft"]["x"] == [level.real.accept_length]
    second = view.result.level(2)
    assert second is not None and [p.accept_length for p in second.simulated] == LENGTHS
    assert second.break_even is not None and traces["c=2 break-even"]["x"] == [second.break_even]

    page = client.get(f"/api/experiments/{study.experiment_id}/headroom", headers=headers).json()
    assert page["sentence"] == view.result.sentence and page["model_break_even"] == pytest.approx(needed)
    client.force_login(owner)
    html = client.get(f"/experiments/{study.experiment_id}/headroom/").content.decode()
    assert view.result.sentence in html and "measure speed, never output quality" in html
