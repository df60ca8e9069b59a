"""A worker killed mid-run and an SSH connection dropped mid-run lose nothing: the run is resumed from its stored
facts, the log tail continues at its byte offset, and every log line is stored exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from experiments.actions.experiments import do_create_experiment
from experiments.models import BenchmarkProfile, LogChunk, Run, ServerConfig
from workers.tasks import drive_host

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _long_run(host, owner, **env) -> Run:
    config = ServerConfig(
        name="long", model_path=f"{host.models_root}/kimi-k2.5-sim", tp_size=2, env={"SIMHOST_LOAD_SECONDS": "2", **env}
    )
    # Several cells, each a few seconds long, so the interruption lands in the middle of benchmarking.
    profile = BenchmarkProfile(
        name="p", concurrency=[1, 2], num_prompts=2, input_len=32, output_len=160, passes=3, stall_timeout_s=30
    )
    experiment = do_create_experiment(
        user=owner, name="reattach", host=host, baseline=config, candidates=[], profile=profile
    )
    return experiment.run_set.get()


def _wait_for_state(run: Run, states: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.state in states:
            return
        time.sleep(0.2)
    raise AssertionError(f"run {run.pk} is {run.state}, not in {states} after {timeout} s")


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


def lines_on_host(run: Run) -> list[str]:
    """The host's log file as lines, a carriage-return rewrite (a progress bar) keeping its last state."""
    text = Path(run.log_path).read_bytes().decode("utf-8", errors="replace")
    return [raw.rstrip("\r").rsplit("\r", 1)[-1] for raw in text.split("\n")[:-1]]


def _worker_argv(queue: str, name: str, *, beat_schedule: Path | None = None) -> list[str]:
    argv = [sys.executable, "-m", "celery", "-A", "dashboard", "worker", "--loglevel", "INFO", "--concurrency", "1",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "-Q", queue, "-n", f"{name}@%h"]  # fmt: skip
    if beat_schedule is not None:
        argv += ["--beat", "--schedule", str(beat_schedule)]
    return argv


def test_it_resumes_a_run_after_its_worker_is_killed(sim_host, owner, sshd, private_queue, server_process, tmp_path):
    env = {"SPECDASH_QUEUE": private_queue, "SPECDASH_SSH_KEY_DIR": str(sshd.key_dir),
           "SPECDASH_HEARTBEAT_STALE": "5", "SPECDASH_REATTACH_EVERY": "2"}  # fmt: skip
    first = server_process(_worker_argv(private_queue, "first"), tmp_path / "first.log", **env)
    run = _long_run(sim_host, owner)
    _wait_for_state(run, {Run.State.BENCHMARKING}, timeout=60)
    time.sleep(1.5)  # in the middle of a benchmark cell
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    killed_at = time.monotonic()
    cells_before = run.measurement_set.count()

    second_log = tmp_path / "second.log"
    server_process(_worker_argv(private_queue, "second", beat_schedule=tmp_path / "beat"), second_log, **env)
    _wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, timeout=120)

    assert run.state == Run.State.SUCCEEDED, run.failure()
    assert "re-attached in state benchmarking" in second_log.read_text()
    assert time.monotonic() - killed_at < 90
    assert run.measurement_set.count() == 3 * 2 > cells_before
    _assert_log_stored_exactly_once(run)


def test_it_reconnects_after_the_ssh_connection_drops(sim_host, owner, sshd, private_queue):
    run = _long_run(sim_host, owner)
    driver = threading.Thread(target=drive_host, args=(sim_host.pk,))
    driver.start()
    _wait_for_state(run, {Run.State.BENCHMARKING}, timeout=60)
    time.sleep(1.5)

    # Kill the per-connection sshd processes: our connection drops, the setsid'ed server keeps running.
    subprocess.run(["pkill", "-KILL", "-P", str(sshd.pid)], check=False)
    driver.join(timeout=180)

    run.refresh_from_db()
    assert run.state == Run.State.SUCCEEDED, run.failure()
    assert run.measurement_set.count() == 3 * 2
    _assert_log_stored_exactly_once(run)


def test_it_says_so_when_the_server_died_while_no_worker_watched(
    sim_host, owner, sshd, private_queue, server_process, tmp_path
):
    env = {"SPECDASH_QUEUE": private_queue, "SPECDASH_SSH_KEY_DIR": str(sshd.key_dir),
           "SPECDASH_HEARTBEAT_STALE": "5", "SPECDASH_REATTACH_EVERY": "2"}  # fmt: skip
    first = server_process(_worker_argv(private_queue, "first"), tmp_path / "first.log", **env)
    run = _long_run(sim_host, owner)
    _wait_for_state(run, {Run.State.BENCHMARKING}, timeout=60)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert run.remote_pgid is not None
    os.killpg(run.remote_pgid, signal.SIGKILL)  # the host lost the server meanwhile (here: the same machine)

    server_process(_worker_argv(private_queue, "second", beat_schedule=tmp_path / "beat"), tmp_path / "s.log", **env)
    _wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, timeout=90)

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
