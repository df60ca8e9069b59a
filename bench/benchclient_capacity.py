"""Is the benchmark client ever the bottleneck? Its throughput against a server that answers as fast as it can.

    .venv/bin/python bench/benchclient_capacity.py [--concurrency 512] [--num-prompts 8192] [--output-len 128]
                                                   [--burst-steps 8]

Starts the simulated host's server with its speed model off (SIMHOST_SPEED=0: no sleeps, tokens as fast as the
server's Python can produce them), then runs the shipped client (`python -m workers.benchclient`, one process, one
event loop) at the given concurrency, and reports the client's output tokens/s, how many streams were in flight,
and the CPU that client and server each used. With two CPUs or more the client is pinned to one CPU and the
server to the others, so "on one core" is literal.

Each engine step gives every stream its own event (one token per event without speculation); --burst-steps is
how many steps the server runs before it writes (SIMHOST_FAST_BURST_STEPS), so 1 means one send per token.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "simhost" / "models" / "kimi-k2.5-sim"
sys.path.insert(0, str(REPO))

from simhost.ports import free_port  # noqa: E402


def wait_ready(port: int, server: subprocess.Popen, timeout: float = 60) -> None:
    """Until the simulated server on `port` answers /health 200 (SystemExit if it exits or never does)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise SystemExit("the server did not become ready")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of one live process, from /proc (the server is still running when it is read)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pin(cpus: set[int]) -> Callable[[], None] | None:
    """A preexec_fn that keeps the child on `cpus` (none: wherever the scheduler likes)."""
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=512)
    parser.add_argument("--num-prompts", type=int, default=8192)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--burst-steps", type=int, default=8)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    client_cpus, server_cpus = ({cpus[0]}, set(cpus[1:])) if len(cpus) > 1 else (set(), set())

    port = free_port()
    with tempfile.TemporaryDirectory() as state:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "SIMHOST_SPEED": "0",
            "SIMHOST_LOAD_SECONDS": "0.2",
            "SIMHOST_STATE_DIR": state,
            "SIMHOST_HEALTH_POLL_SECONDS": "0.05",
            "SIMHOST_FAST_BURST_STEPS": str(args.burst_steps),
        }
        log = open(Path(state) / "server.log", "wb")
        server = subprocess.Popen(
            [sys.executable, "-m", "simhost.launch_server", "--model-path", str(MODEL), "--port", str(port),
             "--max-running-requests", str(args.concurrency), "--cuda-graph-max-bs", str(args.concurrency)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_pin(server_cpus),
        )  # fmt: skip
        try:
            wait_ready(port, server)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            server_before = _cpu_seconds(server.pid)
            started = time.perf_counter()
            client = subprocess.run(
                [sys.executable, "-m", "workers.benchclient", "--base-url", f"http://127.0.0.1:{port}",
                 "--concurrency", str(args.concurrency), "--num-prompts", str(args.num_prompts),
                 "--input-len", str(args.input_len), "--output-len", str(args.output_len), "--seed", "1"],
                cwd=REPO, capture_output=True, text=True, check=True, preexec_fn=_pin(client_cpus),
            )  # fmt: skip
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            server_cpu = _cpu_seconds(server.pid) - server_before
        finally:
            server.terminate()
            server.wait(timeout=30)
    result = json.loads(client.stdout)
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tokens = max(result["total_output_tokens"], 1)
    where = f"client on CPU {cpus[0]}, server on the other {len(cpus) - 1}" if client_cpus else "one CPU, shared"
    print(f"{where}; server bursts of {args.burst_steps} step(s) per send")
    print(f"requests: {result['completed']:,} completed, {result['failed']} failed, concurrency {args.concurrency}")
    print(f"streams in flight (mean): {result['concurrency_achieved']:.0f}")
    print(f"output tokens: {result['total_output_tokens']:,} in {result['duration_s']:.2f} s")
    print(f"output throughput measured by the client: {result['output_throughput']:,.0f} tok/s")
    print(f"client CPU: {client_cpu:.2f} s over {wall:.2f} s wall ({client_cpu / wall:.0%} of one core), "
          f"{client_cpu / tokens * 1e6:.1f} us per token")  # fmt: skip
    print(f"server CPU: {server_cpu:.2f} s ({server_cpu / wall:.0%} of one core), "
          f"{server_cpu / tokens * 1e6:.1f} us per token")  # fmt: skip


if __name__ == "__main__":
    main()
