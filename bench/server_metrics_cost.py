"""What scraping the server's /metrics during a cell costs the benchmark client's throughput.

    .venv/bin/python bench/server_metrics_cost.py [--mode speed-model|client-bound] [--pairs 8] [--interval-ms 250]

One simulated server with --enable-metrics, and the shipped client (`python -m workers.benchclient`, one process)
run against it in interleaved pairs: with the gauges scraped every --interval-ms and streamed on stderr as the worker
runs it (--stream-metrics) and without (--metrics-interval-ms 0), the order alternating pair by pair so a slow drift
of the machine cancels out. Each pair gives a ratio, output throughput with / without; the median over the pairs is
the figure, with the spread beside it.

--mode speed-model: the server on its speed model (the simulated GPU sets the pace, as a real one does), noise off.
--mode client-bound: the speed model off (SIMHOST_SPEED=0), so the client's own CPU is what limits throughput and
every microsecond the scrapes take from it shows: the worst case for the client.

Beside the throughput ratio, the ratio of the client's CPU per output token (its user + system time over the tokens
it read), which a machine busy with other work disturbs far less than wall-clock throughput: when the client is the
bottleneck, its throughput is one core over that figure. It also measures the client's CPU per scrape (one GET
/metrics and its parse), from a sampler run alone against the idle server, which bounds the share of a core the
scrapes can take: scrapes per second x CPU per scrape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "simhost" / "models" / "kimi-k2.5-sim"
DRAFT = REPO / "simhost" / "models" / "kimi-k2.5-sim-eagle3"
sys.path.insert(0, str(REPO))

from benchclient_capacity import wait_ready  # noqa: E402  (bench/ is the script's folder)

from simhost.ports import free_port  # noqa: E402
from workers.benchclient import prometheus  # noqa: E402

MODES = {
    # concurrency, prompts, output tokens, server environment
    "speed-model": (32, 32, 128, {"SIMHOST_NOISE": "0", "SIMHOST_LAUNCH_NOISE": "0"}),
    "client-bound": (256, 4096, 128, {"SIMHOST_SPEED": "0"}),
}
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(DRAFT),
          "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "3"]  # fmt: skip


def _pin(cpus: set[int]) -> Callable[[], None] | None:
    """A preexec_fn that keeps the child on `cpus` (none: wherever the scheduler likes)."""
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def _cell(port: int, concurrency: int, prompts: int, output_len: int, interval_ms: int, cpus: set[int]) -> dict:
    """The client's result, with `client_cpu_us_per_token`: its CPU (user + system) over the tokens it read."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = subprocess.run(
        [sys.executable, "-m", "workers.benchclient", "--base-url", f"http://127.0.0.1:{port}",
         "--concurrency", str(concurrency), "--num-prompts", str(prompts), "--input-len", "64",
         "--output-len", str(output_len), "--seed", "1", "--metrics-interval-ms", str(interval_ms),
         *(["--stream-metrics"] if interval_ms else [])],
        cwd=REPO, capture_output=True, text=True, check=True, preexec_fn=_pin(cpus),
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(client.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result["client_cpu_us_per_token"] = cpu / max(result["total_output_tokens"], 1) * 1e6
    # Streamed as the worker's command asks (a line a second on stderr), the rest in the result: every scrape once.
    streamed = [
        json.loads(line.removeprefix(prometheus.STREAM_PREFIX))["samples"]
        for line in client.stderr.splitlines()
        if line.startswith(prometheus.STREAM_PREFIX)
    ]
    result["scrapes"] = sum(map(len, streamed)) + len((result["server_metrics"] or {}).get("samples", []))
    return result


async def _cpu_per_scrape(base_url: str, seconds: float = 5.0) -> tuple[float, int]:
    """The client's CPU seconds per scrape, sampling as fast as the sampler allows against the idle server."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    async with prometheus.GaugeSampler(base_url, prometheus.MIN_INTERVAL_MS) as sampler:
        await asyncio.sleep(seconds)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu / max(len(sampler.samples), 1), len(sampler.samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=MODES, default="speed-model")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--interval-ms", type=int, default=prometheus.DEFAULT_INTERVAL_MS)
    args = parser.parse_args()
    concurrency, prompts, output_len, server_env = MODES[args.mode]
    # With two CPUs or more the client has one to itself and the server the others, as in benchclient_capacity.py.
    cpus = sorted(os.sched_getaffinity(0))
    client_cpus, server_cpus = ({cpus[0]}, set(cpus[1:])) if len(cpus) > 1 else (set(), set())

    port = free_port()
    with tempfile.TemporaryDirectory() as state:
        env = {**os.environ, "PYTHONPATH": str(REPO), "SIMHOST_LOAD_SECONDS": "0.2", "SIMHOST_STATE_DIR": state,
               **server_env}  # fmt: skip
        log = open(Path(state) / "server.log", "wb")
        server = subprocess.Popen(
            [sys.executable, "-m", "simhost.launch_server", "--model-path", str(MODEL), "--port", str(port),
             *EAGLE3, "--enable-metrics", "--max-running-requests", str(concurrency),
             "--cuda-graph-max-bs", str(concurrency)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_pin(server_cpus),
        )  # fmt: skip
        try:
            wait_ready(port, server)
            _cell(port, concurrency, prompts, output_len, 0, client_cpus)  # warms the server, unmeasured
            ratios, cpu_ratios, scrapes, throughput = [], [], [], []
            for pair in range(args.pairs):
                order = (args.interval_ms, 0) if pair % 2 == 0 else (0, args.interval_ms)
                results = {
                    interval: _cell(port, concurrency, prompts, output_len, interval, client_cpus) for interval in order
                }
                with_scrapes, without = results[args.interval_ms], results[0]
                ratios.append(with_scrapes["output_throughput"] / without["output_throughput"])
                cpu_ratios.append(with_scrapes["client_cpu_us_per_token"] / without["client_cpu_us_per_token"])
                scrapes.append(with_scrapes["scrapes"])
                throughput.append(without["output_throughput"])
                print(
                    f"pair {pair + 1}: {with_scrapes['output_throughput']:,.0f} tok/s with "
                    f"{scrapes[-1]} scrapes over {with_scrapes['duration_s']:.1f} s, "
                    f"{without['output_throughput']:,.0f} without: ratio {ratios[-1]:.4f}; client CPU per token "
                    f"{with_scrapes['client_cpu_us_per_token']:.2f} vs {without['client_cpu_us_per_token']:.2f} us",
                    flush=True,
                )
            cpu, count = asyncio.run(_cpu_per_scrape(f"http://127.0.0.1:{port}"))
        finally:
            server.terminate()
            server.wait(timeout=30)

    median = statistics.median(ratios)
    print(f"\nmode {args.mode}: concurrency {concurrency}, {prompts} prompts x {output_len} tokens, "
          f"scrapes every {args.interval_ms} ms, {args.pairs} interleaved pairs")  # fmt: skip
    print(f"throughput without scraping: median {statistics.median(throughput):,.0f} tok/s")
    print(f"ratio with / without: median {median:.4f} (range {min(ratios):.4f}-{max(ratios):.4f}), "
          f"cost {1 - median:+.2%} (target < 1%)")  # fmt: skip
    cpu_median = statistics.median(cpu_ratios)
    print(f"client CPU per token with / without: median {cpu_median:.4f} "
          f"(range {min(cpu_ratios):.4f}-{max(cpu_ratios):.4f}): what a client-bound cell pays")  # fmt: skip
    per_second = 1000 / args.interval_ms
    print(f"client CPU per scrape: {cpu * 1e6:.0f} us ({count} scrapes alone), so {per_second:g} scrapes/s take "
          f"{cpu * per_second:.2%} of one core")  # fmt: skip


if __name__ == "__main__":
    main()
