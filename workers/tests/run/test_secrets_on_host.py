"""A secret reaches the server's environment and no command line on the host: another local user of a shared GPU
host reads every process's arguments (`ps`), never its environment. Watched over the real sshd for the whole run,
from the launch to the teardown, every few milliseconds."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from experiments.models import Run
from workers.tasks import drive_host

from .simruns import queue_run, sim_config

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_queue"),
]

TOKEN = "hf_PsN3verSh0wsTh1s"
HOST_SECRET = "host-Passw0rd-0f-the-admin"


class ProcessWatch:
    """Reads every process's command line (what `ps` shows anyone) and, for the server's, its environment, until
    stopped: what held each secret, and whether a server process received it."""

    def __init__(self) -> None:
        self.in_command_lines: set[str] = set()
        self.received: set[str] = set()
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.003):
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit():
                    continue
                try:
                    argv = (proc / "cmdline").read_bytes()
                    if TOKEN.encode() in argv or HOST_SECRET.encode() in argv:
                        self.in_command_lines.add(argv.replace(b"\0", b" ").decode(errors="replace")[:300])
                    if b"kimi-k2.5-sim" in argv:
                        environ = (proc / "environ").read_bytes()
                        self.received |= {s for s in (TOKEN, HOST_SECRET) if s.encode() in environ}
                except OSError:
                    continue  # gone meanwhile
            self.scans += 1


def test_the_hosts_process_list_never_shows_a_secret_and_the_server_receives_it(sim_host, owner):
    sim_host.default_env = {"SIMHOST_PASSWORD": HOST_SECRET}
    sim_host.save(update_fields=["default_env"])
    config = sim_config(sim_host, env={"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"}, expect={"env_propagated": ["HF_TOKEN"]})
    run = queue_run(sim_host, config, owner)

    with ProcessWatch() as watch:
        drive_host(run.host_id)

    run.refresh_from_db()
    assert run.state == Run.State.SUCCEEDED, run.failure()
    assert watch.scans > 50
    assert watch.in_command_lines == set()
    assert watch.received == {TOKEN, HOST_SECRET}
    assert "on standard input: HF_TOKEN SIMHOST_PASSWORD" in run.launch_command and TOKEN not in run.launch_command
