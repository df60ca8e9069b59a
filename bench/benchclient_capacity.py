"""Is the benchmark client ever the bottleneck? Its throughput against a server that answers as fast as it can.

    .venv/bin/python bench/benchclient_capacity.py [--concurrency 512] [--num-prompts 2048] [--output-len 128]

Starts the simulated host's server with its speed model off (SIMHOST_SPEED=0: no sleeps, tokens as fast as the
server's Python can produce them), then runs the shipped client (`python -m workers.benchclient`, one process, one
event loop, hence one core) at the given concurrency, and reports the client's output tokens/s, how many streams
were in flight, and the CPU the client itself used. On a 2-core machine server and client share the cores, so
the figure is a floor for the client: alone on a core it only gets faster.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "simhost" / "models" / "kimi-k2.5-sim"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(port: int, server: subprocess.Popen, timeout: float = 60) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=512)
    parser.add_argument("--num-prompts", type=int, default=2048)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=128)
    args = parser.parse_args()

    port = _free_port()
    with tempfile.TemporaryDirectory() as state:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "SIMHOST_SPEED": "0",
            "SIMHOST_LOAD_SECONDS": "0.2",
            "SIMHOST_STATE_DIR": state,
            "SIMHOST_HEALTH_POLL_SECONDS": "0.05",
        }
        log = open(Path(state) / "server.log", "wb")
        server = subprocess.Popen(
            [sys.executable, "-m", "simhost.launch_server", "--model-path", str(MODEL), "--port", str(port),
             "--max-running-requests", str(args.concurrency), "--cuda-graph-max-bs", str(args.concurrency)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            _wait_ready(port, server)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            client = subprocess.run(
                [sys.executable, "-m", "workers.benchclient", "--base-url", f"http://127.0.0.1:{port}",
                 "--concurrency", str(args.concurrency), "--num-prompts", str(args.num_prompts),
                 "--input-len", str(args.input_len), "--output-len", str(args.output_len), "--seed", "1"],
                cwd=REPO, capture_output=True, text=True, check=True,
            )  # fmt: skip
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
        finally:
            server.terminate()
            server.wait(timeout=30)
    result = json.loads(client.stdout)
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"requests: {result['completed']:,} completed, {result['failed']} failed, concurrency {args.concurrency}")
    print(f"streams in flight (mean): {result['concurrency_achieved']:.0f}")
    print(f"output tokens: {result['total_output_tokens']:,} in {result['duration_s']:.2f} s")
    print(f"output throughput measured by the client: {result['output_throughput']:,.0f} tok/s")
    print(f"client CPU: {client_cpu:.2f} s over {wall:.2f} s wall ({client_cpu / wall:.0%} of one core), "
          f"{client_cpu / max(result['total_output_tokens'], 1) * 1e6:.1f} us per token")  # fmt: skip


if __name__ == "__main__":
    main()
