"""A small tuning study end to end: API -> Celery worker -> real sshd -> simulated host, rounds planned as runs end,
with the worker killed mid-study: another worker resumes the run it held, and the study goes on from its rows (no
round created twice, no launch measured twice or lost)."""

from __future__ import annotations

import os
import signal

import pytest

from experiments.models import ApiToken, Host, Measurement, Run, Study, StudyRound
from experiments.tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
# Two ranks, not the eight of the real model: each rank is a process the loaded machine starts at every launch,
# and nothing here depends on how many there are (the simulated speed does not).
TP_SIZE = 2

# A short load and a simulated GPU twice as fast for every config: the study ranks configs by relative speed, which
# the speed factor leaves as it is, in half the benchmark time.
FAST = {"SIMHOST_LOAD_SECONDS": "0.2", "SIMHOST_SPEED": "2"}


def _runs(study: Study) -> str:
    runs = Run.objects.filter(experiment__studyround__study=study).select_related("experiment__studyround")
    described = "; ".join(f"round {r.experiment.studyround.index} run {r.pk} {r.state} {r.failure_message[:150]}"
                          for r in runs)  # fmt: skip
    return f"runs: {described or 'none'}"


def _benchmarking_in_round(study: Study, index: int) -> bool:
    runs = Run.objects.filter(experiment__studyround__study=study, experiment__studyround__index=index)
    return runs.filter(state=Run.State.BENCHMARKING).exists()


def test_it_runs_a_study_and_survives_a_worker_killed_mid_study(
    client, owner, sim_host: Host, private_queue, start_worker, tmp_path
):
    fast_reattach = {"SPECDASH_HEARTBEAT_STALE": "3", "SPECDASH_REATTACH_EVERY": "1"}
    first = start_worker(private_queue, "first", tmp_path / "first.log", **fast_reattach)
    _, token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {token}"}
    models = sim_host.models_root
    target = {"model_path": f"{models}/kimi-k2.5-sim", "tp_size": TP_SIZE, "env": FAST}
    payload = {
        "name": "tune",
        "host": sim_host.name,
        "baseline": {"name": "baseline", **target},
        # s1-k1-d2, s2-k1-d3, and s1-k8-d8 whose graph capture runs out of memory on the host.
        "sweep": {
            "base": {
                **target,
                "speculative_algorithm": "EAGLE3",
                "speculative_draft_model_path": f"{models}/kimi-k2.5-sim-eagle3",
            },
            "speculative_num_steps": [1, 2],
            "speculative_eagle_topk": [1, 8],
            "speculative_num_draft_tokens": [8],
        },
        "profile": {"concurrency": [1, 4], "num_prompts": 4, "input_len": 32, "output_len": 48, "passes": 1},
        "budget": {"launches": 7},
        "round_size": 2,
        "seed": 1,
    }

    response = client.post("/api/studies", payload, content_type="application/json", headers=headers)

    assert response.status_code == 201, response.content
    study = Study.objects.get(pk=response.json()["id"])
    assert study.studyconfig_set.count() == 4  # s2-k8-d8 too: SGLang's tree holds it; the host does not
    until(lambda: _benchmarking_in_round(study, 1), 90, "the second round benchmarking", lambda: _runs(study))
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    start_worker(private_queue, "second", tmp_path / "second.log", beat_schedule=tmp_path / "beat", **fast_reattach)
    until(lambda: not Study.objects.get(pk=study.pk).is_running, 120, "the study's end", lambda: _runs(study))

    body = client.get(f"/api/studies/{study.pk}", headers=headers).json()
    assert body["state"] == "finished" and body["stop_reason"] in ("precision", "budget"), body
    assert "re-attached in state" in (tmp_path / "second.log").read_text()
    rounds = list(StudyRound.objects.filter(study=study).order_by("index"))
    assert [r.index for r in rounds] == list(range(len(rounds))) and len(rounds) >= 2
    runs = Run.objects.filter(experiment__studyround__study=study)
    assert not runs.exclude(state__in=Run.TERMINAL_STATES).exists()  # nothing lost
    for run in runs.filter(state=Run.State.SUCCEEDED):  # each launch measured once at each concurrency
        assert sorted(Measurement.objects.filter(run=run).values_list("concurrency", flat=True)) == [1, 4]
    assert body["budget"]["launches_spent"] == runs.exclude(started_at=None).count() <= 7
    trials = {t["config"]: t["state"] for t in body["trials"]}
    assert all(state in ("measured", "failed") for state in trials.values()), trials
    assert all(trials[name] == "failed" for name in trials if "-k8-" in name)
    assert [b["concurrency"] for b in body["best"]] == [1, 4]
    assert body["recommendation"] and body["recommendation"][0]["low"] == 1
