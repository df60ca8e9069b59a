"""Issue 28's "Must show", end to end: a small study (two configs, two concurrencies) on the simulated host behind a
real sshd and a Celery worker, its adaptive schedule built through the API and verified there: the adaptive server
(`--speculative-adaptive` reading the schedule's file) within the study's precision of each band's static winner at
each concurrency, and the server's step gauge moving as the schedule says."""

from __future__ import annotations

import itertools
import json
import math
from datetime import datetime

import pytest

from experiments.actions.schedules import VERIFY_LAUNCHES
from experiments.analysis import comparison
from experiments.models import AdaptiveSchedule, ApiToken, Host, Measurement, Run, ServerMetricSample, Study
from experiments.reads.schedules import winner_of
from experiments.tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
# Two ranks, not the eight of the real model: each rank is a process the loaded machine starts at every launch,
# and nothing here depends on how many there are (the simulated speed does not).
TP_SIZE = 2

# SGLang 0.5.23 serves --speculative-adaptive and the step gauges; a short load, a GPU twice as fast (the verdicts
# are ratios of interleaved launches, which the speed factor leaves as they are), a draft that accepts well enough for
# the study's single launches to see speculation pay at c = 2 on a loaded machine's wall clock, and a decode-log tick
# every 4 steps so the gauges move within the short cells.
ENV = {
    "SIMHOST_SGLANG_VERSION": "0.5.23",
    "SIMHOST_LOAD_SECONDS": "0.2",
    "SIMHOST_SPEED": "2",
    "SIMHOST_ACCEPT_P": "0.8",
}
ARGS = ["--decode-log-interval", "4"]
LEVELS = [2, 16]  # two steps pay at c = 2 (~1.26x) and lose a little at c = 16 (~0.95x) at this acceptance
WITHIN = 0.1
# What the simulated GPU's clock still takes from the machine is how a cell's requests fall into the engine's batches:
# which arrive together in one prefill, and, under --speculative-adaptive, how many steps of the ramp and the tail run
# at a batch small enough to route to the c = 2 slot. That is a few steps per request, whatever their length: over 16
# output tokens an adaptive server's c = 16 cells ranged over 11% (an interval's low end at 0.887 on a machine at load
# 8-18), over 32 over 3-5%, so the interval stays well clear of the 0.9 floor while a server that runs the wrong steps
# (0.79x at c = 2) is still far below it. At twice the speed (four times was too fast: under the whole suite's load one
# launch of two steps measured 0.97x at c = 2 against the model's 1.26x) the study's single launches see on the
# client's clock what the speed model says.
OUTPUT_LEN = 32


def _cells(study_id: int) -> str:
    """Each measured cell of the study (config, concurrency, tok/s), to read a recommendation by."""
    rows = Measurement.objects.filter(run__experiment__studyround__study_id=study_id).order_by("run__sequence")
    return "; ".join(
        f"{m.run.config.name} c={m.concurrency} {m.output_throughput:.1f}" for m in rows.select_related("run__config")
    )


def _runs(**where) -> str:
    return "; ".join(
        f"{r.pk} {r.config.name} {r.state} {r.failure_message[:200]}"
        for r in Run.objects.filter(**where).select_related("config").order_by("sequence")
    )


def test_a_studys_schedule_is_built_and_verified_on_the_simulated_host(
    client, owner, sim_host: Host, celery_worker_process
):
    _, token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {token}"}
    models = sim_host.models_root
    target = {"model_path": f"{models}/kimi-k2.5-sim", "tp_size": TP_SIZE, "env": ENV, "extra_args": ARGS}
    payload = {
        "name": "tune for a schedule",
        "host": sim_host.name,
        "baseline": {"name": "baseline", **target},
        "sweep": {
            "base": {**target, "speculative_algorithm": "EAGLE3",
                     "speculative_draft_model_path": f"{models}/kimi-k2.5-sim-eagle3"},
            "speculative_num_steps": [2],
            "speculative_eagle_topk": [1],
        },
        "profile": {"concurrency": LEVELS, "num_prompts": 16, "input_len": 16, "output_len": OUTPUT_LEN,
                    "passes": 1, "readiness_timeout_s": 120},
        "budget": {"launches": 3},  # one round: the baseline and the candidate, one launch each (the next: 2 more)
        "precision": {"within": WITHIN},
        "round_size": 2,
        "seed": 1,
    }  # fmt: skip
    response = client.post("/api/studies", payload, content_type="application/json", headers=headers)
    assert response.status_code == 201, response.content
    study_id = response.json()["id"]
    until(lambda: not Study.objects.get(pk=study_id).is_running, 180, "the study's end",
          lambda: _runs(experiment__studyround__study_id=study_id))  # fmt: skip
    study = Study.objects.get(pk=study_id)
    assert study.state == Study.State.FINISHED and study.recommendation, _runs(experiment__studyround__study=study)

    built = client.post(f"/api/studies/{study_id}/schedule", content_type="application/json", headers=headers)

    assert built.status_code == 201, (built.content, study.recommendation, _cells(study_id))
    schedule = AdaptiveSchedule.objects.get(pk=built.json()["id"])
    steps = {int(k): v["candidate_steps"] for k, v in json.loads(schedule.config_json).items()}
    assert any(s != [0] for s in steps.values()), (study.recommendation, steps)
    verification = schedule.verification_id
    assert verification is not None
    until(lambda: not Run.objects.filter(experiment_id=verification).exclude(state__in=Run.TERMINAL_STATES).exists(),
          300, "the verification's end", lambda: _runs(experiment_id=verification))  # fmt: skip
    runs = Run.objects.filter(experiment_id=verification)
    assert set(runs.values_list("state", flat=True)) == {Run.State.SUCCEEDED}, _runs(experiment_id=verification)
    adaptive_runs = runs.exclude(config__adaptive_schedule=None)
    assert adaptive_runs.count() == 2
    for run in adaptive_runs:
        assert "--speculative-adaptive --speculative-adaptive-config" in run.launch_command
        assert run.effective_args.get("speculative_adaptive") is True, run.effective_args

    body = client.get(f"/api/schedules/{schedule.pk}", headers=headers).json()

    # The page's verdict, per concurrency with its interval, from the client's wall clock (what a real host gives).
    assert [c["concurrency"] for c in body["checks"]] == LEVELS
    assert all(c["ci_low"] is not None and c["launches"] == VERIFY_LAUNCHES for c in body["checks"]), body["checks"]
    assert body["sentence"].count(" [") == len(LEVELS), body["sentence"]
    # Within the study's precision of each band's winner, judged by the same comparison on the simulated GPU's own
    # clock (each request's tok/s from the server's mean end-to-end latency), which a loaded test machine cannot
    # stretch: its client's wall clock can.
    for level in LEVELS:
        winner = winner_of(schedule.bands, level)
        assert winner is not None
        samples = [
            comparison.Sample("adaptive" if m.run.config.adaptive_schedule_id else "winner", level,
                              m.run.launch_index, m.pass_index,
                              1000 * OUTPUT_LEN / (m.server_mean_e2e_latency_ms or math.inf))
            for m in Measurement.objects.filter(run__in=runs, concurrency=level).select_related("run__config")
            if m.run.config.adaptive_schedule_id or m.run.config_id == winner["config_id"]
        ]  # fmt: skip
        (row,) = comparison.compare_configs(samples, baseline="winner", candidates=["adaptive"])
        assert row.ci_low is not None and row.ci_low >= 1 - WITHIN, (level, winner["config"], row, _phases(runs))
    # The server switched as the schedule says: only its slots' steps were ever active, the c = 2 slot's among them.
    seen = set(ServerMetricSample.objects.filter(run__in=adaptive_runs).values_list("spec_num_steps", flat=True))
    allowed = {float(s) for candidates in steps.values() for s in candidates}
    assert seen - {None} <= allowed and float(steps[min(steps)][0]) in seen, (seen, steps)
    client.force_login(owner)
    page = client.get(schedule.get_absolute_url())
    assert b'id="headline"' in page.content and b'id="switching-figure"' in page.content


def _phases(runs) -> str:
    """Each run's seconds per state, for a failure's message (what a slow or stuck verification spent its time on)."""
    out = []
    for run in runs.order_by("pk"):
        stamps = [(t["state"], datetime.fromisoformat(t["at"])) for t in run.timeline]
        out.append(" ".join(f"{a}:{(tb - ta).total_seconds():.1f}" for (a, ta), (_, tb) in itertools.pairwise(stamps)))
    return "\n".join(out)
