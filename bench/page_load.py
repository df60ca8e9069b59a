"""Page load in Chromium: first paint and load event of the pages that hold the most data.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/specdash_bench .venv/bin/python bench/page_load.py
    .venv/bin/python bench/page_load.py --loads 9 --history-runs 10000 --configs 50 --levels 8

Migrates the database DATABASE_URL names (use a scratch one), seeds a finished experiment of `--configs` configs x
`--levels` concurrencies (as `comparison_page.py` builds it) and a history series of `--history-runs` nightly
runs (one baseline-only experiment each, two concurrencies), starts the real ASGI server (daphne, as in the
browser tests) on a free port, logs a user in through the login form with Playwright driving Debian's
`chromium`, and loads each page `--loads` times in one browser tab. The first load has a cold browser cache; the
others reuse it, as a person reading results does. Per page: time to first byte, first paint, first contentful
paint, the load event, and the first chart drawn (charts come in after the load event, once visible), from the
browser's own Performance API (milliseconds after navigation start). Static files are served collected and
compressed, as production and `make demo` serve them. The rows it made are deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
# Static files as production and the demo serve them: collected, hashed, gzip-compressed, cached for good.
os.environ.setdefault("SPECDASH_STATIC_COLLECTED", "1")

import django  # noqa: E402

django.setup()

from comparison_page import build_experiment  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.hashers import make_password  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.urls import reverse  # noqa: E402
from django.utils import timezone  # noqa: E402

from experiments import roles  # noqa: E402
from experiments.actions.audit import Actor  # noqa: E402
from experiments.actions.users import do_set_role  # noqa: E402
from experiments.models import BenchmarkProfile, Experiment, Host, Measurement, Run, ServerConfig  # noqa: E402
from simhost.ports import free_port, wait_for_port  # noqa: E402

TIMINGS_JS = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const paint = Object.fromEntries(performance.getEntriesByType("paint").map((e) => [e.name, e.startTime]));
  return {ttfb: nav.responseStart, response_end: nav.responseEnd, dom_interactive: nav.domInteractive,
          first_paint: paint["first-paint"] ?? null,
          fcp: paint["first-contentful-paint"] ?? null, dom_content_loaded: nav.domContentLoadedEventEnd,
          load: nav.loadEventEnd, transferred: nav.transferSize};
}"""


def build_history(runs: int) -> tuple[Host, ServerConfig, BenchmarkProfile]:
    """`runs` nightly baseline-only experiments of one config on one host: one history series of `runs` points."""
    stamp = time.time_ns()
    host = Host.objects.create(name=f"bench-history-{stamp}", address="127.0.0.1", username="gpu")
    config = ServerConfig.objects.create(name="baseline", model_path="/models/kimi-k2.5-sim", tp_size=8)
    profile = BenchmarkProfile.objects.create(name="nightly", concurrency=[1, 4], passes=1, launches=1)
    start = timezone.now() - timedelta(days=runs)
    experiments = Experiment.objects.bulk_create(
        Experiment(
            name=f"nightly {i}", host=host, baseline=config, profile=profile, created_at=start + timedelta(days=i)
        )
        for i in range(runs)
    )
    made = Run.objects.bulk_create(
        Run(experiment=e, config=config, host=host, sequence=0, state=Run.State.SUCCEEDED,
            started_at=e.created_at, finished_at=e.created_at + timedelta(minutes=5))
        for e in experiments
    )  # fmt: skip
    Measurement.objects.bulk_create(
        (
            Measurement(run=run, pass_index=0, concurrency=level, completed=16, duration_s=10.0,
                        output_throughput=83.0 * level ** 0.8 * (1 + 0.02 * ((i * 7919) % 13 - 6) / 6),
                        total_throughput=1.0, request_throughput=1.0)
            for i, run in enumerate(made) for level in (1, 4)
        ),
        batch_size=2000,
    )  # fmt: skip
    return host, config, profile


def start_server(port: int, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "dashboard.asgi:application"]
    process = subprocess.Popen(argv, cwd=REPO, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    wait_for_port(port, timeout=30, process=process)
    return process


def measure(url_of: dict[str, str], base: str, username: str, password: str, loads: int) -> dict[str, list[dict]]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    results: dict[str, list[dict]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        for name, path in url_of.items():
            # A new browser context per page: its first load has a cold cache, the next ones reuse it.
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            page = context.new_page()
            page.on("console", lambda message: print("console:", message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: print("page error:", error))
            page.goto(f"{base}/login/")
            page.fill("#id_username", username)
            page.fill("#id_password", password)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/")
            results[name] = []
            for _ in range(loads):
                page.goto(f"{base}{path}", wait_until="load")
                # loadEventEnd is set just after the load event's handlers return; the paint entries once painted.
                page.wait_for_function(
                    "() => performance.getEntriesByType('navigation')[0].loadEventEnd > 0"
                    " && performance.getEntriesByType('paint').length > 0"
                )
                timings = page.evaluate(TIMINGS_JS)
                # The first chart drawn: charts come in after the load event as they scroll into view, so one below
                # the fold is scrolled to first (as a reader would), right after the load event.
                timings["chart"] = None
                if page.locator(".chart").count():
                    page.locator(".chart").first.scroll_into_view_if_needed()
                    page.wait_for_function(
                        "() => [...document.querySelectorAll('.chart')].some((c) => c.querySelector('.main-svg'))",
                        timeout=30_000,
                    )
                    timings["chart"] = page.evaluate("performance.now()")
                results[name].append(timings)
            context.close()
        browser.close()
    return results


def _fmt(values: list[float | None]) -> str:
    present = [v for v in values if v is not None]
    return f"{statistics.median(present):7.0f}" if present else "      —"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=50)
    parser.add_argument("--levels", type=int, default=8)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--history-runs", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=7, help="loads of each page (the first with a cold cache)")
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    if os.environ["SPECDASH_STATIC_COLLECTED"] == "1":
        call_command("collectstatic", interactive=False, verbosity=0)
    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    started = time.perf_counter()
    experiment = build_experiment(args.configs, [2**k for k in range(args.levels)], args.passes)
    host, config, profile = build_history(args.history_runs)
    password = "bench-pass-1"
    user = get_user_model().objects.create(
        username=f"bench-{time.time_ns()}", password=make_password(password, hasher="pbkdf2_sha256")
    )
    do_set_role(user, roles.VIEWER, Actor.command())
    print(f"seeded in {time.perf_counter() - started:.1f} s")
    pages = {
        f"experiment ({args.configs} configs x {args.levels} concurrencies)": experiment.get_absolute_url(),
        f"history ({args.history_runs} runs)": reverse(
            "series_detail", args=[host.pk, config.content_hash, profile.series_key]
        ),
        "experiments table": reverse("experiment_table"),
    }
    port = free_port()
    log = REPO / "var" / "bench-page-load-daphne.log"
    log.parent.mkdir(exist_ok=True)
    server = start_server(port, log)
    try:
        results = measure(pages, f"http://127.0.0.1:{port}", user.username, password, args.loads)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
        Measurement.objects.filter(run__experiment__in=[experiment, *Experiment.objects.filter(host=host)]).delete()
        Run.objects.filter(host__in=[host, experiment.host]).delete()
        Experiment.objects.filter(host__in=[host, experiment.host]).delete()
        user.delete()

    print(f"{args.loads} loads per page, medians in ms (cold = the first load, with an empty browser cache)")
    print(f"{'page':48} {'ttfb':>7} {'paint':>7} {'fcp':>7} {'load':>7} {'chart':>7} | cold: {'paint':>7} {'load':>7}"
          f" {'chart':>7}  kB")  # fmt: skip
    for name, rows in results.items():
        warm = rows[1:] or rows
        cold = rows[0]
        print(
            f"{name:48} {_fmt([r['ttfb'] for r in warm])} {_fmt([r['first_paint'] for r in warm])}"
            f" {_fmt([r['fcp'] for r in warm])} {_fmt([r['load'] for r in warm])} {_fmt([r['chart'] for r in warm])} |"
            f"       {_fmt([cold['first_paint']])} {_fmt([cold['load']])} {_fmt([cold['chart']])}"
            f"  {cold['transferred'] / 1024:.0f}"
        )


if __name__ == "__main__":
    main()
