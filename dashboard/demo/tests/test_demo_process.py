"""`manage.py demo` as a person runs it: a second Ctrl-C during its cleanup still stops every child, and a demo
killed hard leaves children that the next demo of the checkout finds and stops (their ports free again)."""

from __future__ import annotations

import json
import os
import signal
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


def test_it_stops_every_child_on_a_second_ctrl_c_and_after_a_hard_kill(tmp_path):
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
