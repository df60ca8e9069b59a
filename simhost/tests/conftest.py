"""Fixtures for the simhost suite: launch `python -m simhost.launch_server` like specdash does (own process
group, stdout+stderr to a log file) with a fast load and a private GPU registry."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from simhost.ports import free_port

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "simhost" / "models"
TARGET = str(MODELS / "kimi-k2.5-sim")
DRAFT = str(MODELS / "kimi-k2.5-sim-eagle3")
DRAFT_131K = str(MODELS / "kimi-k2.5-sim-eagle3-ctx131k")
NVIDIA_SMI = str(REPO / "simhost" / "bin" / "nvidia-smi")
# `python -m sglang.bench_serving` for any 0.5.x, from a venv without the server's GPU stack (tools/bench_serving.py).
BENCH_SERVING = str(REPO / "simhost" / "tools" / "bench_serving.py")
EAGLE3_2STEP = [
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT,
    "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3",
]  # fmt: skip


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    env: dict[str, str]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    # A bound on waiting, not a verdict: a fresh-clone run once saw a server's loading log stop for over 15 s.
    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.text(), re.M)
            if match:
                return match
            if self.proc.poll() is not None:
                match = re.search(pattern, self.text(), re.M)
                if match:
                    return match
                raise AssertionError(f"server exited ({self.proc.returncode}) before /{pattern}/:\n{self.text()}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for /{pattern}/:\n{self.text()[-3000:]}")

    def wait_ready(self) -> None:
        self.wait_for(r"The server is fired up and ready to roll!")

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def group_pids(self) -> list[int]:
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.proc.pid and fields[0] != "Z":
                pids.append(int(stat.parent.name))
        return pids

    def smi(self, *args: str) -> str:
        return subprocess.run([NVIDIA_SMI, *args], env=self.env, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "simhost-state"


@pytest.fixture
def launch(tmp_path: Path, state_dir: Path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def _launch(*flags: str, env: dict[str, str] | None = None, model: str = TARGET, cwd: Path | None = None) -> Server:
        port = free_port()
        full_env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "SIMHOST_LOAD_SECONDS": "0.3",
            "SIMHOST_STATE_DIR": str(state_dir),
            **(env or {}),
        }
        log = tmp_path / f"server-{port}.log"
        argv = [sys.executable, "-m", "simhost.launch_server", "--model-path", model, "--port", str(port), *flags]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=cwd or tmp_path, start_new_session=True
            )
        server = Server(proc, port, log, full_env)
        servers.append(server)
        return server

    yield _launch
    for server in servers:
        server.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(5)


async def e2e_histogram(http: Any) -> tuple[float, float]:
    """The server's sglang:e2e_request_latency_seconds (_sum, _count): its requests' latencies on the simulated GPU's
    clock. `http` is an aiohttp session on the server's base URL."""
    async with http.get("/metrics") as response:
        text = await response.text()
    values = {}
    for line in text.splitlines():
        name = line.split("{")[0]
        if name in ("sglang:e2e_request_latency_seconds_sum", "sglang:e2e_request_latency_seconds_count"):
            values[name] = float(line.rsplit(" ", 1)[1])
    return values["sglang:e2e_request_latency_seconds_sum"], values["sglang:e2e_request_latency_seconds_count"]
