"""A worker killed mid-run and an SSH connection dropped mid-run lose nothing: the run is resumed from its stored
facts, the log tail continues at its byte offset, and every log line is stored exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from experiments.models import LogChunk, Run
from experiments.tests.factories import make_experiment, make_profile
from workers.tasks import drive_host
from workers.tests.run.simruns import lines_on_host, queue_run, sim_config, wait_for_state

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _long_run(host, owner, **env) -> Run:
    config = sim_config(host, "long", env={"SIMHOST_LOAD_SECONDS": "2", **env})
    # Two cells of a few seconds each (c = 1 ~4 s, then c = 2 ~2 s): the interruption, 1.5 s into benchmarking, lands in
    # the middle of the first, with the second still to come.
    return queue_run(
        host, config, owner, name="reattach", concurrency=[1, 2], output_len=160, passes=1, stall_timeout_s=30
    )


def _assert_log_stored_exactly_once(run: Run) -> None:
    """The stored lines are contiguous and equal to the log file on the host (here: this machine)."""
    chunks = list(LogChunk.objects.filter(run=run).order_by("first_line"))
    expected = 1
    stored: list[str] = []
    for chunk in chunks:
        assert chunk.first_line == expected, f"gap or overlap at line {expected}"
        expected += chunk.line_count
        stored.extend(chunk.lines())
    assert stored == lines_on_host(run)


def test_it_resumes_a_run_after_its_worker_is_killed(sim_host, owner, private_queue, start_worker, tmp_path):
    fast_reattach = {"SPECDASH_HEARTBEAT_STALE": "5", "SPECDASH_REATTACH_EVERY": "2"}
    first = start_worker(private_queue, "first", tmp_path / "first.log", **fast_reattach)
    run = _long_run(sim_host, owner)
    wait_for_state(run, {Run.State.BENCHMARKING}, timeout=60)
    time.sleep(1.5)  # in the middle of a benchmark cell
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    killed_at = time.monotonic()
    cells_before = run.measurement_set.count()

    second_log = tmp_path / "second.log"
    start_worker(private_queue, "second", second_log, beat_schedule=tmp_path / "beat", **fast_reattach)
    wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, timeout=120)

    assert run.state == Run.State.SUCCEEDED, run.failure()
    assert "re-attached in state benchmarking" in second_log.read_text()
    assert time.monotonic() - killed_at < 90
    assert run.measurement_set.count() == 2 > cells_before
    _assert_log_stored_exactly_once(run)


def test_it_reconnects_after_the_ssh_connection_drops(sim_host, owner, sshd, private_queue):
    run = _long_run(sim_host, owner)
    driver = threading.Thread(target=drive_host, args=(sim_host.pk,))
    driver.start()
    wait_for_state(run, {Run.State.BENCHMARKING}, timeout=60)
    time.sleep(1.5)

    # Kill the per-connection sshd processes: our connection drops, the setsid'ed server keeps running.
    subprocess.run(["pkill", "-KILL", "-P", str(sshd.pid)], check=False)
    driver.join(timeout=180)

    run.refresh_from_db()
    assert run.state == Run.State.SUCCEEDED, run.failure()
    assert run.measurement_set.count() == 2
    _assert_log_stored_exactly_once(run)


def test_it_says_so_when_the_server_died_while_no_worker_watched(
    sim_host, owner, private_queue, start_worker, tmp_path
):
    fast_reattach = {"SPECDASH_HEARTBEAT_STALE": "5", "SPECDASH_REATTACH_EVERY": "2"}
    first = start_worker(private_queue, "first", tmp_path / "first.log", **fast_reattach)
    run = _long_run(sim_host, owner)
    wait_for_state(run, {Run.State.BENCHMARKING}, timeout=60)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert run.remote_pgid is not None
    os.killpg(run.remote_pgid, signal.SIGKILL)  # the host lost the server meanwhile (here: the same machine)

    start_worker(private_queue, "second", tmp_path / "s.log", beat_schedule=tmp_path / "beat", **fast_reattach)
    wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, timeout=90)

    assert run.state == Run.State.FAILED
    assert run.failure_kind == Run.FailureKind.CRASHED
    assert run.failure_message == "The server exited while no worker was connected to the host."
    assert [p["state"] for p in run.phases()][-2:] == ["teardown", "failed"]


def test_it_finishes_the_teardown_of_a_run_whose_worker_died_while_tearing_down(
    sim_host, owner, private_queue, tmp_path
):
    from datetime import timedelta

    from django.utils import timezone

    from experiments.models import Run as RunModel
    from workers.tasks import resume_run

    run = _long_run(sim_host, owner)
    gone = subprocess.Popen(["true"])
    gone.wait()  # the server the dead worker had already stopped
    log_path = tmp_path / "run.log"
    log_path.write_text("[2026-11-29 10:00:00] The server is fired up and ready to roll!\n")
    RunModel.objects.filter(pk=run.pk).update(
        state=RunModel.State.TEARDOWN,
        worker="dead-worker",
        heartbeat_at=timezone.now() - timedelta(minutes=5),
        remote_pid=gone.pid,
        remote_pgid=gone.pid,
        server_port=sim_host.server_port,
        log_path=str(log_path),
    )

    assert resume_run(run.pk) == RunModel.State.SUCCEEDED

    run.refresh_from_db()
    assert run.state == RunModel.State.SUCCEEDED and not run.failure_kind
    assert run.log_lines == 1  # the tail drained what the dead worker had not stored
    sim_host.refresh_from_db()
    assert sim_host.active_run_id is None and not sim_host.is_dirty


def test_it_wakes_a_queued_run_whose_wake_up_message_was_lost(sim_host, owner, private_queue, start_worker, tmp_path):
    # Runs queued while no message reached a worker (here: none was ever sent, as after a Redis restart).
    config = sim_config(sim_host, "woken")
    config.save()
    profile = make_profile(concurrency=[1], num_prompts=2, input_len=32, output_len=16)
    experiment = make_experiment(host=sim_host, baseline=config, candidates=[], profile=profile)
    run = experiment.run_set.get()

    start_worker(private_queue, "woken", tmp_path / "w.log", beat_schedule=tmp_path / "beat", SPECDASH_WAKE_EVERY="1")
    wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, timeout=90)

    assert run.state == Run.State.SUCCEEDED, run.failure()
