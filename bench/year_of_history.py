"""A year of history: every main page and API list, load event in Chromium and queries per request.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/specdash_year .venv/bin/python bench/year_of_history.py
    .venv/bin/python bench/year_of_history.py --scale 0.1 --loads 5

Migrates the database DATABASE_URL names (use a scratch one: the rows stay, so a second run reuses them with
`--reuse`), seeds a team's year with bulk inserts (at `--scale` 1: 50 hosts, 200 configs, 20,000 experiments of a
baseline and two candidates, 100,000 runs with measurements at three concurrencies, 1,000 flags with their series,
suspicions, notes and tags, an audit log), starts the real ASGI server (daphne, as `page_load.py` does), logs an
admin in through the login form with Playwright driving Debian's `chromium`, and loads each page `--loads` times.
Per page: the median load event (ms after navigation start, warm browser cache: the first load is left out), the
queries one request makes (Django's CaptureQueriesContext around the test client, in this process), and the
ratio of its load event to an empty page's (the 404 page, measured in the same run: the anchor).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ.setdefault("SPECDASH_STATIC_COLLECTED", "1")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.hashers import make_password  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import reverse  # noqa: E402
from django.utils import timezone  # noqa: E402
from page_load import measure, start_server  # noqa: E402

from experiments import roles  # noqa: E402
from experiments.actions.audit import Actor  # noqa: E402
from experiments.actions.users import do_set_role  # noqa: E402
from experiments.models import (  # noqa: E402
    AuditEvent,
    BenchmarkProfile,
    Candidate,
    Experiment,
    Flag,
    FlagSeries,
    Host,
    Measurement,
    Run,
    ServerConfig,
    SuspectSeries,
    Suspicion,
)
from simhost.ports import free_port  # noqa: E402

PREFIX = "year-"  # every host this script makes is named so; --reuse finds them by it
LEVELS = (1, 4, 16)
RUNS_PER_EXPERIMENT = 5  # baseline and two candidates, then baseline and the first candidate again
BATCH = 5000


def seed(scale: float) -> None:
    rng = random.Random(31)
    hosts = Host.objects.bulk_create(
        Host(name=f"{PREFIX}{i}", address=f"10.0.{i // 250}.{i % 250}", username="gpu")
        for i in range(max(2, round(50 * scale)))
    )
    # Configs and profiles one by one: save() stamps their content hash and series key.
    configs = []
    for i in range(max(3, round(200 * scale))):
        spec = {} if i % 4 == 0 else {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 1 + i % 4,
                                      "speculative_num_draft_tokens": 2 + i % 5,
                                      "speculative_draft_model_path": "/models/kimi-k2.5-sim-eagle3"}  # fmt: skip
        config = ServerConfig(name=f"{PREFIX}config-{i}", model_path="/models/kimi-k2.5-sim", tp_size=8, **spec)
        config.save()
        configs.append(config)
    profiles = []
    for i in range(4):
        profile = BenchmarkProfile(name=f"{PREFIX}nightly-{i}", concurrency=list(LEVELS), passes=1, output_len=128 + i)
        profile.save()
        profiles.append(profile)
    users = [get_user_model().objects.create(username=f"{PREFIX}user-{i}-{time.time_ns()}") for i in range(5)]

    count = max(10, round(20_000 * scale))
    start = timezone.now() - timedelta(days=365)
    step = timedelta(days=365) / count
    experiments = []
    for i in range(count):
        # A host runs a handful of series: a few baselines, each with its own profile, so histories are long.
        host = hosts[i % len(hosts)]
        baseline = configs[(i // len(hosts)) % 3 * 4 % len(configs)]
        experiments.append(Experiment(
            name=f"nightly {i}", host=host, baseline=baseline, profile=profiles[i % len(profiles)],
            created_by=users[i % len(users)], created_at=start + step * i,
            tags="nightly eagle3" if i % 7 == 0 else "",
            notes=f"**Run {i}** after the driver update." if i % 10 == 0 else "",
        ))  # fmt: skip
    experiments = Experiment.objects.bulk_create(experiments, batch_size=BATCH)
    candidates, runs = [], []
    for i, experiment in enumerate(experiments):
        picks = [configs[(i * 7 + k) % len(configs)] for k in (1, 2)]
        candidates += [Candidate(experiment=experiment, config=c, position=k) for k, c in enumerate(picks)]
        order = [experiment.baseline, *picks, experiment.baseline, picks[0]]
        for sequence, config in enumerate(order):
            at = experiment.created_at + timedelta(minutes=6 * sequence)
            failed = rng.random() < 0.03
            runs.append(Run(
                experiment=experiment, config=config, host=experiment.host, sequence=sequence,
                launch_index=sequence // 3, state=Run.State.FAILED if failed else Run.State.SUCCEEDED,
                failure_kind="oom" if failed else "", failure_message="CUDA out of memory" if failed else "",
                created_at=at, started_at=at, finished_at=at + timedelta(minutes=5),
                timeline=[{"state": s, "at": at.isoformat()} for s in Run.LIFECYCLE],
            ))  # fmt: skip
    Candidate.objects.bulk_create(candidates, batch_size=BATCH)
    runs = Run.objects.bulk_create(runs, batch_size=BATCH)
    measurements = [
        Measurement(run=run, pass_index=0, concurrency=level, completed=16, duration_s=10.0,
                    output_throughput=83.0 * level**0.8 * rng.gauss(1.0, 0.02), total_throughput=1.0,
                    request_throughput=1.0, accept_length=2.0 if run.config.is_speculative else None)
        for run in runs if run.state == Run.State.SUCCEEDED for level in LEVELS
    ]  # fmt: skip
    for chunk in range(0, len(measurements), BATCH):
        Measurement.objects.bulk_create(measurements[chunk : chunk + BATCH])
    _seed_review(rng, runs, max(5, round(1000 * scale)))
    AuditEvent.objects.bulk_create(
        (AuditEvent(at=e.created_at, actor=e.created_by, actor_name=e.created_by.username if e.created_by else "",
                    action="experiment.submit", target_type="experiment", target_id=e.pk, target_label=e.name)
         for e in experiments),
        batch_size=BATCH,
    )  # fmt: skip


def _seed_review(rng: random.Random, runs: list[Run], flags: int) -> None:
    """`flags` flags with one series each, and a suspicion (half confirmed into a flag) for every second one."""
    succeeded = [r for r in runs if r.state == Run.State.SUCCEEDED and r.sequence == 0]
    made = []
    for i in range(flags):
        run = succeeded[(i * 97) % len(succeeded)]
        change = rng.choice((-1, 1)) * rng.uniform(0.04, 0.12)
        made.append(Flag(
            host=run.host, config=run.config, config_hash=run.config.content_hash,
            profile_key=run.experiment.profile.series_key, profile_label=str(run.experiment.profile),
            concurrency=LEVELS[i % 3], run=run, kind="confirmed",
            direction="regression" if change < 0 else "improvement",
            baseline_mean=100.0, new_mean=100.0 * (1 + change), change=change, score=3.1,
            message=f"{change:+.1%} at concurrency {LEVELS[i % 3]}", created_at=run.created_at,
            triage=rng.choice(list(Flag.Triage.values)),
        ))  # fmt: skip
    made = Flag.objects.bulk_create(made, batch_size=BATCH)
    FlagSeries.objects.bulk_create(
        (FlagSeries(flag=f, config=f.config, config_hash=f.config_hash, concurrency=f.concurrency, change_run=f.run,
                    baseline_mean=f.baseline_mean, new_mean=f.new_mean, change=f.change, score=f.score) for f in made),
        batch_size=BATCH,
    )  # fmt: skip
    suspicions = Suspicion.objects.bulk_create(
        (Suspicion(host=f.host, experiment=f.run.experiment, run=f.run, config=f.config, config_hash=f.config_hash,
                   profile_key=f.profile_key, profile_label=f.profile_label, flag=f if i % 4 == 0 else None,
                   state=Suspicion.State.CONFIRMED if i % 4 == 0 else Suspicion.State.DISMISSED,
                   created_at=f.created_at) for i, f in enumerate(made) if i % 2 == 0),
        batch_size=BATCH,
    )  # fmt: skip
    SuspectSeries.objects.bulk_create(
        (SuspectSeries(suspicion=s, concurrency=1, change_run=s.run, last_before_run=s.run, direction="regression",
                       baseline_mean=100.0, suspected_mean=95.0, change=-0.05, score=2.8, hypotheses={})
         for s in suspicions),
        batch_size=BATCH,
    )  # fmt: skip


def pages() -> dict[str, str]:
    host = Host.objects.filter(name__startswith=PREFIX).order_by("pk").first()
    assert host is not None, "no seeded hosts: run without --reuse"
    experiment = Experiment.objects.filter(host=host).order_by("-created_at").first()
    assert experiment is not None
    run = Run.objects.filter(experiment=experiment, sequence=1).first() or Run.objects.filter(experiment=experiment)[0]
    flag = Flag.objects.filter(host__name__startswith=PREFIX).order_by("-created_at").first()
    assert run is not None and flag is not None
    others = list(Run.objects.filter(experiment=experiment, state=Run.State.SUCCEEDED).order_by("sequence")[:3])
    series = [host.pk, experiment.baseline.content_hash, experiment.profile.series_key]
    return {
        "empty page (anchor: the 404 page)": "/no-such-page/",
        "experiments list": reverse("experiment_table"),
        "experiments list, filtered": reverse("experiment_table") + f"?q=nightly&status=finished&host={host.name}",
        "experiments list, page 2": reverse("experiment_table") + "?page=2",
        "experiment detail": experiment.get_absolute_url(),
        "compare (3 runs)": reverse("compare") + "?" + "&".join(f"pick=r{r.pk}" for r in others),
        "run": reverse("run_detail", args=[run.pk]),
        "hosts list": reverse("host_list"),
        "host": reverse("host_detail", args=[host.pk]),
        "configs list": reverse("config_list"),
        "config": reverse("config_detail", args=[experiment.baseline.pk]),
        "history of a series": reverse("series_detail", args=series),
        "flags list": reverse("flag_list"),
        "flag": reverse("flag_detail", args=[flag.pk]),
        "studies": reverse("study_list"),
        "prompt sets": reverse("prompt_set_list"),
        "notifications": reverse("notification_settings"),
        "team": reverse("user_list"),
        "audit log": reverse("audit_log"),
        "api: experiments": "/api/experiments",
        "api: experiments page 2": "/api/experiments?page=2",
        "api: runs": "/api/runs",
        "api: configs": "/api/configs",
        "api: hosts": "/api/hosts",
        "api: prompt sets": "/api/prompt-sets",
        "api: profiles": "/api/profiles",
    }


def count_queries(user, url_of: dict[str, str]) -> dict[str, tuple[int, int, int]]:
    """Per page: (status, queries, response kB) of one request through the test client, after a warm-up one."""
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    counted = {}
    for name, path in url_of.items():
        client.get(path)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path)
        counted[name] = (response.status_code, len(queries), len(response.content) // 1024)
    return counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="1: 100,000 runs; 0.1 for a quick run")
    parser.add_argument("--loads", type=int, default=5, help="loads of each page (the first, cold, left out)")
    parser.add_argument("--reuse", action="store_true", help="measure the rows a previous run seeded")
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)
    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    if not args.reuse:
        started = time.perf_counter()
        seed(args.scale)
        print(f"seeded in {time.perf_counter() - started:.1f} s")
    if connection.vendor == "postgresql":
        # The planner's statistics, as autovacuum keeps them on a live database: without them (bulk inserts on a
        # server with autovacuum off) it guesses 250 rows a table and picks nested loops over every run.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    print(
        f"rows: {Host.objects.count()} hosts, {ServerConfig.objects.count()} configs, {Experiment.objects.count()}"
        f" experiments, {Run.objects.count()} runs, {Measurement.objects.count()} measurements,"
        f" {Flag.objects.count()} flags"
    )
    password = "bench-pass-1"
    user = get_user_model().objects.create(
        username=f"bench-{time.time_ns()}", password=make_password(password, hasher="pbkdf2_sha256")
    )
    do_set_role(user, roles.ADMIN, Actor.command())
    url_of = pages()
    counted = count_queries(user, url_of)
    port = free_port()
    log = REPO / "var" / "bench-year-daphne.log"
    log.parent.mkdir(exist_ok=True)
    server = start_server(port, log)
    try:
        results = measure(url_of, f"http://127.0.0.1:{port}", user.username, password, args.loads)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
        user.delete()

    load_of = {name: statistics.median(r["load"] for r in (rows[1:] or rows)) for name, rows in results.items()}
    anchor = load_of[next(iter(url_of))]
    print(f"{args.loads} loads per page, median load event of the warm ones; queries of one request")
    print(f"{'page':36} {'status':>6} {'load ms':>8} {'x empty':>8} {'queries':>8} {'kB':>6}")
    for name, load in load_of.items():
        status, queries, kilobytes = counted[name]
        print(f"{name:36} {status:6} {load:8.0f} {load / anchor:8.1f} {queries:8} {kilobytes:6}")


if __name__ == "__main__":
    main()
