"""Whether a launched server's process group still lives, asked through a real sshd as a run asks it: a zombie
never counts, nor does a process that took a dead leader's pid, and a group whose leader died while its children
serve on is still alive."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from workers.run.server import ServerGroup
from workers.ssh import HostConnection

pytestmark = pytest.mark.integration


def _alive(sshd, pgid: int) -> bool:
    async def ask() -> bool:
        conn = await HostConnection.open(sshd.access())
        try:
            return await ServerGroup(conn, pgid).alive()
        finally:
            await conn.close()

    return asyncio.run(ask())


def _wait_for(predicate, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


@pytest.fixture
def group() -> Iterator[subprocess.Popen]:
    """A group like a server's: a leader under setsid with a child of its own (the scheduler) that outlives it.
    The leader is this test's child, so it stays a zombie until the test reaps it (an init that reaps late)."""
    leader = subprocess.Popen(["setsid", "bash", "-c", "sleep 60 & echo $! ; read -r _"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert leader.stdout is not None
    leader.child_pid = int(leader.stdout.readline())  # type: ignore[attr-defined]
    _wait_for(lambda: os.getpgid(leader.pid) == leader.pid)
    try:
        yield leader
    finally:
        for pid in (leader.child_pid, leader.pid):  # type: ignore[attr-defined]
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        leader.wait()


def test_a_group_whose_leader_lives_is_alive(sshd, group):
    assert _alive(sshd, group.pid)


def test_a_group_is_alive_while_a_child_lives_on_after_its_leader_died(sshd, group):
    group.stdin.close()  # the leader's `read` ends: it exits, and stays a zombie (unreaped)
    _wait_for(lambda: _state(group.pid) == "Z")

    assert _alive(sshd, group.pid)

    group.wait()  # reaped: its pid is gone, its child still runs in its group
    assert _alive(sshd, group.pid)


def test_a_group_of_zombies_only_is_gone(sshd, group):
    os.kill(group.child_pid, signal.SIGKILL)
    group.stdin.close()
    _wait_for(lambda: _state(group.pid) == "Z")

    assert not _alive(sshd, group.pid)


def test_a_group_with_nothing_left_is_gone(sshd, group):
    os.kill(group.child_pid, signal.SIGKILL)
    os.kill(group.pid, signal.SIGKILL)
    group.wait()

    assert not _alive(sshd, group.pid)


def test_a_process_that_took_the_leaders_pid_is_not_the_group(sshd, group):
    """The child stands in for a process that took a dead leader's pid: it lives, but in another group, and no
    group of its number exists."""
    assert os.getpgid(group.child_pid) != group.child_pid

    assert not _alive(sshd, group.child_pid)
