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
        "--warmup-requests", "2", "--request-timeout", "120", "--temperature", "0.0", "--top-p", "1.0",
        "--metrics-interval-ms", "250", "--stream-metrics",
    ]  # fmt: skip
    assert benchmark.timeout(profile, 16) == 120 * 5 + benchmark.TIMEOUT_MARGIN_S  # 64 prompts: 4 waves, and one more


def test_it_scrapes_the_servers_metrics_as_often_as_the_settings_say(settings):
    settings.SPECDASH_SERVER_METRICS_MS = 0

    command = benchmark.command(Host(name="gpu", python="python3", server_port=31000), BenchmarkProfile(), 4, "/w")

    argv = shlex.split(command.partition(" && ")[2])
    assert argv[argv.index("--metrics-interval-ms") + 1] == "0"


def test_it_passes_the_prompt_file_sampling_and_output_keeping():
    host = Host(name="gpu", python="python3", server_port=31000)
    profile = BenchmarkProfile(temperature=0.7, top_p=0.9)

    command = benchmark.command(
        host, profile, 4, "/w", prompts_file="/w/.specdash/prompts-ab;c.jsonl", keep_outputs=True
    )

    argv = shlex.split(command.partition(" && ")[2])
    assert argv[argv.index("--temperature") + 1] == "0.7" and argv[argv.index("--top-p") + 1] == "0.9"
    assert argv[argv.index("--prompts-file") + 1] == "/w/.specdash/prompts-ab;c.jsonl"
    assert argv[-1] == "--keep-outputs"


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


@pytest.mark.integration
@pytest.mark.django_db
def test_it_ships_a_profiles_sample_once_per_version(sshd, tmp_path, member):
    from experiments.actions.audit import Actor
    from experiments.actions.prompts import do_create_prompt_set
    from experiments.models import BenchmarkProfile as Profile

    lines = "\n".join(f'{{"prompt": "prompt number {i} with words", "category": "c{i % 2}"}}' for i in range(9))
    prompt_set = do_create_prompt_set(Actor(member), "shipped", lines.encode())
    profile = Profile.objects.create(name="p", concurrency=[1], num_prompts=5, prompt_set=prompt_set)
    random_ids = Profile.objects.create(name="r", concurrency=[1])
    work_dir = str(tmp_path / "work")

    async def install() -> list[str | None]:
        conn = await HostConnection.open(sshd.access())
        try:
            paths = [await benchmark.install_prompts(conn, work_dir, profile) for _ in range(2)]
            return [*paths, await benchmark.install_prompts(conn, work_dir, random_ids)]
        finally:
            await conn.close()

    first, again, none = asyncio.run(install())

    data, prompts = profile.prompt_sample()  # type: ignore[misc]
    assert first is not None and first == again and none is None
    assert Path(first).read_bytes() == data and len(prompts) == 5
    assert [p.name for p in Path(work_dir, benchmark.REMOTE_DIR).iterdir()] == [Path(first).name]


class _FlushingApi:
    """A server that refuses to flush (400, pending requests) a few times, as SGLang does while the last cell's
    requests are still leaving its scheduler."""

    def __init__(self, statuses: list[int | None]) -> None:
        self.statuses = statuses
        self.calls = 0

    async def post(self, path: str) -> int | None:
        assert path == "/flush_cache"
        self.calls += 1
        return self.statuses.pop(0) if self.statuses else 400


async def test_it_waits_for_the_server_to_flush_before_a_cell_and_says_when_it_never_did(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(benchmark, "FLUSH_RETRY_S", 0.001)
    SGLANG_CONFIG = SimpleNamespace(engine="sglang")  # the engine says how its server is reset: SGLang's /flush_cache
    later = SimpleNamespace(api=_FlushingApi([400, 400, 200]), run=SimpleNamespace(pk=1), config=SGLANG_CONFIG)
    assert await benchmark._flush_cache(later) is True  # type: ignore[arg-type]
    assert later.api.calls == 3

    monkeypatch.setattr(benchmark, "FLUSH_WAIT_S", 0.05)
    never = SimpleNamespace(api=_FlushingApi([]), run=SimpleNamespace(pk=1), config=SGLANG_CONFIG)
    assert await benchmark._flush_cache(never) is False  # type: ignore[arg-type]
    unreachable = SimpleNamespace(api=_FlushingApi([None]), run=SimpleNamespace(pk=1), config=SGLANG_CONFIG)
    assert await benchmark._flush_cache(unreachable) is False  # type: ignore[arg-type]


def test_it_reads_the_clients_progress_lines_and_nothing_else():
    assert benchmark.progress_counts("benchclient: 12/32 done, 0 failed\n") == (12, 32)
    assert benchmark.progress_counts("benchclient: 32/32 done, 3 failed") == (32, 32)
    for line in ("benchclient: warming up with 1 request(s)", "benchclient: 33/32 done", "12/32 done",
                 "benchclient: 1/9999999999 done", "Traceback (most recent call last):"):  # fmt: skip
        assert benchmark.progress_counts(line) is None, line
