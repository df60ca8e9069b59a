"""Confirm before alerting, end to end: real sshd, a Celery worker, the simulated host slowed on demand."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from experiments.models import ApiToken, Flag, Host, Measurement, Run, SuspectSeries, Suspicion
from experiments.tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
# Two ranks, not the eight of the real model: each rank is a process the loaded machine starts at every launch,
# and nothing here depends on how many there are (the simulated speed does not).
TP_SIZE = 2

HISTORY = 8  # the fewest results the checks compare a new one with
LEVELS = [1, 2]
SLOWER = "1.3"  # SIMHOST_SLOWDOWN of a slowed launch: throughput 1 / 1.3 - 1 = -23%
SPEED = 4  # SIMHOST_SPEED of every launch


def _runs_of(experiment_id: int) -> str:
    return "; ".join(
        f"{r.pk} {r.state} {r.failure_message[:200]} confirms={r.confirms_id}"
        for r in Run.objects.filter(experiment_id=experiment_id).order_by("sequence")
    )


def _series(experiment_id: int) -> str:
    """Each concurrency's results in launch order (tok/s), to read a failed verdict by."""
    rows = Measurement.objects.filter(run__experiment_id=experiment_id).order_by("run__sequence")
    values: dict[int, list[str]] = {}
    for m in rows.values("concurrency", "output_throughput", "run__sequence"):
        values.setdefault(m["concurrency"], []).append(f"{m['output_throughput']:.1f}")
    return "; ".join(f"c={c}: {' '.join(v)}" for c, v in sorted(values.items()))


def _rerun(client, headers, experiment_id: int) -> Run:
    response = client.post(
        f"/api/experiments/{experiment_id}/rerun", {"launches": 1}, content_type="application/json", headers=headers
    )
    assert response.status_code == 201, response.content
    return Run.objects.filter(experiment_id=experiment_id).order_by("-sequence").first()  # type: ignore[return-value]


def _finished(run: Run, timeout: float = 120) -> Run:
    def done():
        run.refresh_from_db()
        return run.state in Run.TERMINAL_STATES

    until(done, timeout, f"run {run.pk} finished", lambda: _runs_of(run.experiment_id))
    assert run.state == Run.State.SUCCEEDED, _runs_of(run.experiment_id)
    return run


def test_a_noisy_result_is_confirmed_away_and_a_drift_is_confirmed_into_one_flag(
    client, owner, sim_host: Host, celery_worker_process, tmp_path: Path
):
    # The host's speed is read from a file at every server launch, so the test slows the next launches without
    # touching the config (which would start another series).
    slowdown = tmp_path / "slowdown"
    slowdown.write_text("1.0")
    sim_host.shell_setup += f"\nexport SIMHOST_SLOWDOWN=$(cat {shlex.quote(str(slowdown))} 2>/dev/null || echo 1.0)"
    # The simulated GPU at four times its pace: its steps keep to its own clock, so a cell measures the speed model
    # (and a 30% slowdown) as at its own pace, in a quarter of the time; 14 launches make this the suite's longest.
    sim_host.shell_setup += f"\nexport SIMHOST_SPEED={SPEED}"
    sim_host.save(update_fields=["shell_setup"])
    _, raw_token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {raw_token}"}
    payload = {
        "name": "nightly baseline",
        "host": sim_host.name,
        "baseline": {"name": "baseline", "model_path": f"{sim_host.models_root}/kimi-k2.5-sim", "tp_size": TP_SIZE},
        # Two long requests a cell rather than many short ones: what a loaded machine adds to a cell is the time
        # between requests and around each one (the simulated GPU's steps catch up with its own clock), so fewer
        # request boundaries per second of cell keep the measured throughput on the speed model's.
        "profile": {"concurrency": LEVELS, "num_prompts": 2, "input_len": 32, "output_len": 128, "seed": 1,
                    "passes": 1, "launches": HISTORY, "readiness_timeout_s": 120},
    }  # fmt: skip
    response = client.post("/api/experiments", payload, content_type="application/json", headers=headers)
    assert response.status_code == 201, response.content
    experiment_id = response.json()["id"]
    history = list(Run.objects.filter(experiment_id=experiment_id))
    for run in history:
        _finished(run, timeout=180)
    assert not Suspicion.objects.exists(), f"the history itself was suspected: {_series(experiment_id)}"

    # One noisy result: only the next launch runs 30% slower per step (a change well above the noise of these short
    # cells, so it is suspected whatever else the machine runs; the checks' own sensitivity is the unit tests').
    slowdown.write_text(SLOWER)
    noisy = _rerun(client, headers, experiment_id)
    until(
        lambda: Run.objects.get(pk=noisy.pk).state in ("verifying", "benchmarking", "teardown", "succeeded"), 60,
        "the noisy launch past its server start", lambda: _runs_of(experiment_id),
    )  # fmt: skip
    slowdown.write_text("1.0")  # the running server keeps the speed it was launched with
    _finished(noisy)
    # (On a timeout: each concurrency's results, to tell a slowdown the machine's load hid from a check that missed.)
    suspicion = until(
        lambda: Suspicion.objects.filter(run=noisy).first(), 30, "the noisy launch suspected",
        lambda: f"{_runs_of(experiment_id)}; tok/s {_series(experiment_id)}",
    )  # fmt: skip
    confirming = until(lambda: list(suspicion.confirming_runs.all()), 10, "a confirming launch queued")
    assert len(confirming) == 1 and confirming[0].config_id == noisy.config_id
    _finished(confirming[0])
    # The decision follows the confirming run's end (its measurements judged); wait for it rather than race it.
    until(
        lambda: Suspicion.objects.get(pk=suspicion.pk).state != Suspicion.State.AWAITING, 60,
        "the noisy suspicion decided", lambda: _runs_of(experiment_id),
    )  # fmt: skip
    suspicion.refresh_from_db()
    assert suspicion.state == Suspicion.State.DISMISSED, _series(experiment_id)
    assert not Flag.objects.exists()

    # A drift: every launch from now on runs 30% slower per step.
    slowdown.write_text(SLOWER)
    drifted = _finished(_rerun(client, headers, experiment_id))
    suspicion = until(
        lambda: Suspicion.objects.filter(run=drifted).first(), 30, "the drifted launch suspected",
        lambda: f"{_runs_of(experiment_id)}; tok/s {_series(experiment_id)}",
    )  # fmt: skip
    assert not Flag.objects.exists()  # suspected only: nobody is told before the confirmation
    until(
        lambda: Suspicion.objects.get(pk=suspicion.pk).state != Suspicion.State.AWAITING, 240,
        "the drift's suspicion decided", lambda: _runs_of(experiment_id),
    )  # fmt: skip
    suspicion.refresh_from_db()
    assert suspicion.state == Suspicion.State.CONFIRMED, _series(experiment_id)
    flag = Flag.objects.get()
    # About the injected slowdown (-23%): the flag says how large the change is, not only that there is one.
    assert flag.direction == "regression" and -0.35 < flag.change < -0.15, _series(experiment_id)
    assert sorted(flag.series.values_list("concurrency", flat=True)) == LEVELS, _series(experiment_id)
    first_confirming = suspicion.confirming_runs.order_by("sequence").first()
    assert first_confirming is not None and first_confirming.state == Run.State.SUCCEEDED
    assert flag.confirmed_by is not None and flag.confirmed_by.confirms_id == suspicion.pk
    assert flag.run == drifted and all(row.state == SuspectSeries.State.CONFIRMED for row in suspicion.series.all())

    # The history page shows the suspicions, their confirmation and result.
    client.force_login(owner)
    run = Run.objects.get(pk=drifted.pk)
    page = client.get(f"/history/{sim_host.pk}/{run.config.content_hash}/{run.experiment.profile.series_key}/")
    text = page.content.decode()
    assert page.status_code == 200 and "not confirmed" in text and f"flag {flag.pk}" in text
