"""Server time and query count of the experiment comparison page on a large finished experiment.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/specdash_bench python bench/comparison_page.py
    python bench/comparison_page.py --configs 50 --levels 8 --passes 5 --repeat 30

Migrates the database DATABASE_URL names (use a scratch one), builds one finished experiment with bulk_create
(a baseline and configs-1 EAGLE-3 candidates, one launch each, every concurrency level x pass measured, the
speculative runs carrying a full window of live facts: 300 Decode points and 300 verify/draft samples), then GETs
the page with Django's test client `--repeat` times after one warm-up request. "Server time" is the whole
request through the middleware stack and the template, without a network. Everything is created in one
transaction that is rolled back at the end, so the database is left as it was.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from experiments import roles  # noqa: E402
from experiments.actions.audit import Actor  # noqa: E402
from experiments.actions.users import do_set_role  # noqa: E402
from experiments.models import (  # noqa: E402
    BenchmarkProfile,
    Candidate,
    Experiment,
    Host,
    Measurement,
    PromptResults,
    PromptSet,
    Run,
    ServerConfig,
)
from experiments.reads.reports import build_report  # noqa: E402

# As the served process does (dashboard/asgi.py): what is loaded at startup is left out of full collections.
gc.freeze()

KEEP_POINTS = 300  # what workers/engines/live_facts.py keeps per series on a run


class _Rollback(Exception):
    pass


def build_experiment(
    configs: int, levels: list[int], passes: int, noise: float = 0.03, categories: int = 0, prompts: int = 0
) -> Experiment:
    rng = random.Random(1)
    stamp = time.time_ns()
    host = Host.objects.create(name=f"bench-{stamp}", address="127.0.0.1", username="gpu")
    baseline = ServerConfig.objects.create(name="baseline", model_path="/models/kimi-k2.5-sim", tp_size=8)
    candidates = []
    for i in range(configs - 1):
        candidates.append(
            ServerConfig.objects.create(
                name=f"eagle3-{i}",
                model_path="/models/kimi-k2.5-sim",
                speculative_algorithm="EAGLE3",
                speculative_draft_model_path="/models/kimi-k2.5-sim-eagle3",
                speculative_num_steps=1 + i % 4,
                speculative_eagle_topk=1 + i % 2,
                speculative_num_draft_tokens=2 + i % 4,
                tp_size=8,
                env={"NCCL_PROTO": "LL"} if i % 3 == 0 else {},
                log_metrics={
                    "verify_ms": r"Target verify: (?P<verify_ms>[\d.]+) ms",
                    "draft_ms": r"draft: (?P<draft_ms>[\d.]+) ms",
                },
            )
        )
    prompt_set = None
    if categories:
        prompt_set = PromptSet.objects.create(name=f"bench-{stamp}", kind="upload", content_hash=f"bench-{stamp}")
    profile = BenchmarkProfile.objects.create(
        name="bench", concurrency=levels, passes=passes, launches=1, prompt_set=prompt_set
    )
    experiment = Experiment.objects.create(name="bench: comparison page", host=host, baseline=baseline, profile=profile)
    Candidate.objects.bulk_create(
        Candidate(experiment=experiment, config=config, position=i) for i, config in enumerate(candidates)
    )
    now = timezone.now()
    runs = Run.objects.bulk_create(
        Run(
            experiment=experiment,
            config=config,
            host=host,
            sequence=i,
            state=Run.State.SUCCEEDED,
            timeline=[{"state": state, "at": now.isoformat()} for state in Run.LIFECYCLE],
            live_facts=_live_facts() if config.is_speculative else {},
        )
        for i, config in enumerate([baseline, *candidates])
    )
    measurements = []
    for i, run in enumerate(runs):
        # Candidates from 20% slower to 20% faster, so some cells are clear and some inconclusive.
        speed = rng.uniform(0.8, 1.2) if i else 1.0
        for level in levels:
            for pass_index in range(passes):
                tok_s = 83.0 * level**0.8 * speed * max(0.5, rng.gauss(1.0, noise))
                latency = {
                    f"{stat}_{metric}": base * (1.0 + 0.1 * level) * factor
                    for metric, base in (
                        ("ttft_ms", 40.0),
                        ("tpot_ms", 12.0),
                        ("itl_ms", 11.0),
                        ("e2e_latency_ms", 1600.0),
                    )
                    for stat, factor in (("mean", 1.0), ("median", 0.95), ("p90", 1.4), ("p99", 2.0))
                }
                measurements.append(
                    Measurement(
                        run=run,
                        pass_index=pass_index,
                        concurrency=level,
                        completed=64,
                        duration_s=30.0,
                        output_throughput=tok_s,
                        total_throughput=2 * tok_s,
                        request_throughput=tok_s / 128,
                        accept_length=2.0 + 0.01 * pass_index if i else None,
                        raw=_raw(rng, categories, i > 0),
                        **latency,
                    )
                )
    Measurement.objects.bulk_create(measurements, batch_size=1000)
    if prompts:
        PromptResults.objects.bulk_create(_prompt_results(run, prompts, categories, i) for i, run in enumerate(runs))
    return experiment


def _raw(rng: random.Random, categories: int, speculative: bool) -> dict:
    if not categories:
        return {"note": "bench"}
    figures = {
        f"category-{c}": {
            "requests": 64 // categories,
            "output_tokens": 128 * (64 // categories),
            "accept_length": rng.uniform(1.5, 3.0) if speculative else None,
            "mean_request_tok_s": rng.uniform(20, 90),
        }
        for c in range(categories)
    }
    return {"note": "bench", "categories": figures}


def _prompt_results(run: Run, prompts: int, categories: int, index: int) -> PromptResults:
    """Each prompt's 128 output ids; every 7th candidate parts from the baseline on a few prompts."""
    requests = []
    for p in range(prompts):
        ids = [(p * 131 + t * 17) % 32000 for t in range(128)]
        if index and index % 7 == 0 and p % 50 == 0:
            ids[10:] = [t + 1 for t in ids[10:]]
        category = f"category-{p % max(categories, 1)}"
        requests.append({"index": p, "category": category, "ok": True, "output_len": 128, "accept_length": 2.0,
                         "output_ids": ids})  # fmt: skip
    return PromptResults(run=run, pass_index=0, concurrency=1, requests=requests).fill_digests()


def _live_facts() -> dict:
    decode = [
        {"n": 10 * k, "ts": None, "running_req": 64, "tokens": 4000, "token_usage": 0.1, "accept_len": 2.0,
         "accept_rate": 0.6, "gen_throughput": 3000.0, "queue_req": 0, "cuda_graph": True}
        for k in range(KEEP_POINTS)
    ]  # fmt: skip
    verify = [[10 * k + 1, 19.0 + (k % 7) * 0.1] for k in range(KEEP_POINTS)]
    draft = [[10 * k + 1, 3.0 + (k % 5) * 0.05] for k in range(KEEP_POINTS)]
    return {"decode": decode, "metrics": {"verify_ms": verify, "draft_ms": draft}}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=50, help="baseline + candidates (default 50)")
    parser.add_argument("--levels", type=int, default=8, help="concurrency levels 1, 2, 4, ... (default 8)")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--noise", type=float, default=0.03, help="pass-to-pass spread (default 0.03)")
    parser.add_argument("--repeat", type=int, default=20, help="timed GETs of the page (default 20)")
    parser.add_argument("--categories", type=int, default=0, help="prompt categories per cell (default 0: random ids)")
    parser.add_argument("--prompts", type=int, default=0, help="prompts with 128 kept output ids per run (default 0)")
    args = parser.parse_args()
    levels = [2**k for k in range(args.levels)]

    call_command("migrate", verbosity=0)
    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    try:
        with transaction.atomic():
            started = time.perf_counter()
            experiment = build_experiment(args.configs, levels, args.passes, args.noise, args.categories, args.prompts)
            print(
                f"built {args.configs} configs x {len(levels)} levels x {args.passes} passes"
                f" = {Measurement.objects.filter(run__experiment=experiment).count()} measurements"
                f" in {time.perf_counter() - started:.1f} s"
            )
            user = get_user_model().objects.create_user(f"bench-{time.time_ns()}")
            do_set_role(user, roles.VIEWER, Actor.command())  # the page is for anyone who reads
            client = Client(HTTP_HOST="localhost")
            client.force_login(user)
            url = experiment.get_absolute_url()

            response = client.get(url)  # warm-up: imports, template compilation, connection
            assert response.status_code == 200, response.status_code
            timings = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                with CaptureQueriesContext(connection) as queries:
                    response = client.get(url)
                timings.append(1000 * (time.perf_counter() - started))
                assert response.status_code == 200, response.status_code

            report_ms = _time(lambda: build_report(experiment, with_figures=False), args.repeat)
            figures_ms = _time(lambda: build_report(experiment), args.repeat)
            print(f"page GET: median {statistics.median(timings):.1f} ms, p95 {_percentile(timings, 0.95):.1f} ms,"
                  f" min {min(timings):.1f} ms over {args.repeat} requests")  # fmt: skip
            print(f"queries per request: {len(queries)}")
            report = build_report(experiment, with_figures=False)
            verdicts = Counter(row.verdict for row in report.rows)
            print(
                f"comparison cells: {len(report.rows)} ({', '.join(f'{n} {v}' for v, n in sorted(verdicts.items()))})"
            )
            print(f"response size: {len(response.content) / 1024:.0f} KiB")
            if report.categories or report.equivalence:
                differ = sum(gate.outputs_differ for gate in report.equivalence.values())
                print(f"category rows: {len(report.categories)}; gates: {len(report.equivalence)} ({differ} differ)")
            print(f"build_report without figures: median {report_ms:.1f} ms; with figures: {figures_ms:.1f} ms")
            raise _Rollback
    except _Rollback:
        pass


def _time(call, repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        timings.append(1000 * (time.perf_counter() - started))
    return statistics.median(timings)


if __name__ == "__main__":
    main()
