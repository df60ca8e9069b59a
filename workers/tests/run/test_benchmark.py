"""The benchmark phase's client on the host: its command line from the profile, its time limit, its result."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import pytest

from experiments.models import BenchmarkProfile, Host
from workers.run import benchmark
from workers.ssh import HostConnection


def test_it_runs_the_client_from_its_directory_with_every_profile_setting_quoted():
    host = Host(name="gpu", python="'/opt/venv name/bin/python' -X dev", server_port=31000)
    profile = BenchmarkProfile(num_prompts=64, input_len=512, output_len=256, seed=7, warmup_requests=2,
                               request_timeout_s=120)  # fmt: skip

    command = benchmark.command(host, profile, 16, "/home/gpu/specdash work")

    cd, _, run = command.partition(" && ")
    version = benchmark.client_version()
    assert shlex.split(cd) == ["cd", "--", f"/home/gpu/specdash work/.specdash/client-{version}"]
    assert shlex.split(run) == [
        "/opt/venv name/bin/python", "-X", "dev", "-m", "benchclient", "--base-url", "http://127.0.0.1:31000",
        "--concurrency", "16", "--num-prompts", "64", "--input-len", "512", "--output-len", "256", "--seed", "7",
        "--warmup-requests", "2", "--request-timeout", "120",
    ]  # fmt: skip
    assert benchmark.timeout(profile, 16) == 120 * 5 + benchmark.TIMEOUT_MARGIN_S  # 64 prompts: 4 waves, and one more


def test_it_reads_the_clients_last_json_line_after_progress_output():
    stdout = 'benchclient: 1/2 done\n{"completed": 1}\nnot json {\n{"completed": 2, "failed": 0}\n'
    assert benchmark.parse_result(stdout) == {"completed": 2, "failed": 0}
    assert benchmark.parse_result('{\n  "completed": 3\n}') == {"completed": 3}  # one pretty-printed object
    assert benchmark.parse_result("Traceback (most recent call last):\nOSError: refused") is None
    assert benchmark.parse_result("[1, 2]") is None


@pytest.mark.integration
def test_two_runs_on_one_machine_install_the_client_once_side_by_side(sshd, tmp_path):
    """Hosts that share a machine share its work directory: their runs install the client at the same moment."""
    work_dir = str(tmp_path / "work dir")

    async def install_twice() -> None:
        first, second = HostConnection.open(sshd.access()), HostConnection.open(sshd.access())
        conns = await asyncio.gather(first, second)
        try:
            await asyncio.gather(*(benchmark.install_client(conn, work_dir) for conn in conns))
            await benchmark.install_client(conns[0], work_dir)  # already there: nothing to do
        finally:
            await asyncio.gather(*(conn.close() for conn in conns))

    asyncio.run(install_twice())

    installed = sorted(p.name for p in Path(work_dir, benchmark.REMOTE_DIR).iterdir())
    assert installed == [f"client-{benchmark.client_version()}"]
    assert Path(benchmark.client_dir(work_dir), "benchclient", "__main__.py").is_file()
