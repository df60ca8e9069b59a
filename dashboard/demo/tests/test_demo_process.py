"""`manage.py demo` as a person runs it: a second demo while one lives says so and stops; a second Ctrl-C during its
cleanup still stops every child, and a demo killed hard leaves children that the next demo of the checkout finds and
stops (their ports free again); its worker outlives a Redis restart, and one that dies is started again."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simhost import hostsetup
from simhost.ports import free_port, port_in_use

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.integration


def _start_demo(env: dict[str, str], log: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "manage.py", "demo"], cwd=REPO, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 120
    while "specdash demo is running" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the demo did not come up:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)
    return process


def _gone_within(processes, timeout: float) -> list[int]:
    """What `processes()` still lists after up to `timeout` s (a SIGKILLed group leaves the table in moments)."""
    deadline = time.monotonic() + timeout
    left = processes()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes()
    return left


def _alive(pgid: int, settle: float = 5) -> bool:
    """Whether anything of the group still runs after `settle` seconds (SIGKILLed members need a moment)."""
    deadline = time.monotonic() + settle
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)


def test_it_leaves_a_live_demo_alone_and_stops_every_child_after_a_hard_kill_or_a_second_ctrl_c(tmp_path):
    var = tmp_path / "var"
    web_port, ssh_port = free_port(), free_port()
    # The suite's session marker stays: a child of either demo that outlived the test is then found (and named) by
    # the session-end check, even when an assertion below stopped the test before its own checks.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPECDASH_", "DATABASE_URL")) or k == "SPECDASH_TEST_SESSION"
    }
    env.update(SPECDASH_VAR_DIR=str(var), SPECDASH_PORT=str(web_port), SPECDASH_SIMHOST_SSH_PORT=str(ssh_port),
               SPECDASH_SIMHOST_SERVER_PORT=str(free_port()), SECRET_KEY="demo-test", SIMHOST_LOAD_SECONDS="30",
               PYTHONUNBUFFERED="1")  # fmt: skip

    first = _start_demo(env, tmp_path / "first.log")
    left = [entry["pgid"] for entry in json.loads((var / "demo-children.json").read_text())]

    # A second demo while this one lives says so and stops, leaving every process of the live one running.
    again = subprocess.run([sys.executable, "manage.py", "demo"], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert again.returncode == 1, again.stdout + again.stderr
    assert f"A demo of this checkout is already running: http://127.0.0.1:{web_port}/ (pid {first.pid})" in again.stderr
    assert all(_alive(pgid, settle=0) for pgid in left) and first.poll() is None
    assert [entry["pgid"] for entry in json.loads((var / "demo-children.json").read_text())] == left

    first.kill()  # as a closed terminal would: its children live on, holding the ports
    first.wait()
    assert all(_alive(pgid, settle=0) for pgid in left) and port_in_use(web_port)

    log = tmp_path / "second.log"
    second = _start_demo(env, log)
    assert "left running by an earlier demo" in log.read_text()
    assert not any(_alive(pgid) for pgid in left)
    children = [entry["pgid"] for entry in json.loads((var / "demo-children.json").read_text())]

    second.send_signal(signal.SIGINT)
    time.sleep(1.5)  # in the cleanup: cancelling the live run, waiting for its teardown
    second.send_signal(signal.SIGINT)
    second.wait(timeout=60)

    assert "Interrupted again: stopping everything now." in log.read_text()
    assert not any(_alive(pgid) for pgid in children)
    assert not port_in_use(web_port) and not port_in_use(ssh_port)
    assert not (var / "demo-children.json").exists()
    # Nor did a simulated server of either demo outlive it (the first one's was loading when its worker died).
    assert _gone_within(lambda: hostsetup.processes_of(var / "simhost-state"), 10) == []


def _demo_children(var: Path) -> dict[str, int]:
    """The demo's children now (the newest of each name): name -> process group."""
    return {entry["name"]: entry["pgid"] for entry in json.loads((var / "demo-children.json").read_text())}


def _wait_for(condition, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(0.2)


def test_it_keeps_its_worker_through_a_redis_restart_and_starts_a_dead_one_again(tmp_path):
    from workers.tests.run.test_operations import PrivateRedis

    var = tmp_path / "var"
    redis_server = PrivateRedis(tmp_path)
    redis_server.start()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPECDASH_", "DATABASE_URL")) or k == "SPECDASH_TEST_SESSION"
    }
    env.update(SPECDASH_VAR_DIR=str(var), SPECDASH_PORT=str(free_port()), SPECDASH_SIMHOST_SSH_PORT=str(free_port()),
               SPECDASH_SIMHOST_SERVER_PORT=str(free_port()), SECRET_KEY="demo-test", SIMHOST_LOAD_SECONDS="1",
               REDIS_URL=redis_server.url, PYTHONUNBUFFERED="1")  # fmt: skip
    log = tmp_path / "demo.log"
    demo = _start_demo(env, log)
    worker_log = var / "log" / "worker.log"
    try:

        def run_states() -> list[str]:
            with sqlite3.connect(var / "specdash.sqlite3") as db:
                return [state for (state,) in db.execute("SELECT state FROM experiments_run WHERE experiment_id = "
                                                         "(SELECT max(id) FROM experiments_experiment)")]  # fmt: skip

        _wait_for(lambda: "benchmarking" in run_states(), "a demo run benchmarking", timeout=90)
        worker = _demo_children(var)["worker"]
        redis_server.kill()  # under a running run's task: the path that took the demo's worker down
        _wait_for(lambda: "Connection to broker lost" in worker_log.read_text(), "the worker noticing", timeout=15)
        time.sleep(2)
        redis_server.start()  # empty
        _wait_for(lambda: worker_log.read_text().count("Connected to") >= 2, "the worker reconnecting", timeout=30)
        assert _alive(worker, settle=0) and _demo_children(var)["worker"] == worker
        assert "exited" not in log.read_text()

        # A worker that dies all the same is started again; the demo goes on.
        os.killpg(worker, signal.SIGKILL)
        _wait_for(lambda: "The worker exited with code" in log.read_text(), "the demo restarting its worker", 15)
        assert "starting it again" in log.read_text()
        # The demo logs the restart before it records the new child: wait for the record, not for the log line.
        _wait_for(lambda: _demo_children(var)["worker"] != worker, "the restarted worker recorded", 15)
        restarted = _demo_children(var)["worker"]
        assert restarted != worker and _alive(restarted, settle=0) and demo.poll() is None
        assert "cancelled" not in run_states()
    finally:
        children = list(_demo_children(var).values()) if (var / "demo-children.json").exists() else []
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=90)
        redis_server.kill()
    assert not any(_alive(pgid) for pgid in children)
