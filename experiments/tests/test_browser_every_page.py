"""Every page of the app at 390 px in the light and the dark theme, under the enforced CSP, with its folds open and its
charts drawn: no sideways scroll, the theme's background, no policy violation, no script error. The pages are the URL
patterns themselves, so a new page is walked without anyone adding it here; a pattern whose parameter the walk cannot
fill fails the test, naming it. The world is made to be wide where a real one is: a pinned host with its key, a run
with a profile, GPU telemetry and server metrics, a study, a schedule, and an experiment imported from result files."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.tokens import default_token_generator
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from experiments.actions.audit import Actor
from experiments.actions.headroom import do_start_headroom
from experiments.actions.notifications import do_subscribe
from experiments.analysis import trace_summary
from experiments.formats import chrome_trace
from experiments.models import (
    AdaptiveSchedule,
    ApiToken,
    Flag,
    GpuSample,
    ProfileTrace,
    PromptSet,
    Run,
    ServerMetricSample,
    Study,
    Subscription,
)
from experiments.tests.waiting import in_a_thread

from .factories import MODELS, finish_run, make_eagle_config, make_experiment, make_history, make_host, make_ssh_key
from .test_browser_policy import RECORD_REFUSALS

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

DATA = Path(__file__).parent / "data"
NO_SIDEWAYS_SCROLL = "document.documentElement.scrollWidth <= window.innerWidth"
# Each theme's page background, from the system setting.
THEMES = {"light": "rgb(247, 248, 250)", "dark": "rgb(12, 17, 29)"}
# Pages no route pattern leads to with the walk's values: those of the experiment imported from result files, and
# the form a set-password link leads to (the link itself only sends the browser on, out of the address bar).
ALSO = ("/experiments/{imported_experiment_id}/", "/runs/{imported_run_id}/", "{set_password_link}")
# The page as a person sees all of it: every fold of its content open, and every chart drawn (charts.js draws one
# once it nears the screen, so each is scrolled to and awaited: Plotly's SVG inside). The charts never drawn come back.
OPEN_AND_DRAW = """async () => {
    for (const fold of document.querySelectorAll('main details:not([open])')) fold.open = true;
    const charts = [...document.querySelectorAll('main .chart')];
    for (const chart of charts) {
        chart.scrollIntoView({block: 'center'});
        const deadline = Date.now() + 20000;
        while (!(chart.classList.contains('js-plotly-plot') && chart.querySelector('.main-svg'))
               && Date.now() < deadline) {
            await new Promise((resolve) => setTimeout(resolve, 50));
        }
    }
    window.scrollTo(0, 0);
    return charts.filter((chart) => !chart.querySelector('.main-svg')).map((chart) => chart.id || chart.className);
}"""
# A pinned host key as OpenSSH writes it: one long word that a narrow page must break.
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHb0dS2lYkZ3xq1m5o0o7QH7Yy9yC2m8n3Jx4Kq8tXl0"
# Not the app's pages: Django's admin, the login form (walked logged in, it sends the user on) and logout.
NOT_WALKED = re.compile(r"^(admin/|api/|login/$|logout/$)")
# Pages that say what they are about in their query: a diff names what it compares with.
QUERIES = {
    "runs/<int:run_id>/diff/": "?with={other_run_id}",
    "experiments/<int:experiment_id>/diff/": "?with={other_experiment_id}",
}
# What sticks out of a too-wide page: the innermost elements reaching past the screen's right edge.
STICKING_OUT = """() => [...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > innerWidth + 1
                 && ![...e.children].some(c => c.getBoundingClientRect().right > innerWidth + 1))
    .slice(0, 5).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
                          (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ').join('.') : '')
                          + ' ' + JSON.stringify((e.textContent || '').trim().slice(0, 40)))"""


def _patterns(resolver: URLResolver, prefix: str = "") -> Iterator[str]:
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _patterns(entry, route)
        elif isinstance(entry, URLPattern):
            yield route


def _study(owner) -> Study:
    """A study as a person starts one (the API); its launches wait in a queue no worker listens to."""
    return in_a_thread(lambda: _start_study(owner))


def _imported(owner) -> Run:
    """A run of an experiment imported from bench_serving's result files (the API, as `specdash import` sends them)."""
    client = Client()
    _, token = ApiToken.issue(owner)
    make_host(name="import-host")
    files = [{"name": name, "content": (DATA / name).read_text()}
             for name in ("bench_serving_baseline.jsonl", "bench_serving_eagle3.jsonl")]  # fmt: skip
    response = client.post("/api/imports", {"host": "import-host", "files": files}, content_type="application/json",
                           headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert response.status_code == 201, response.content
    run = Run.objects.filter(experiment_id=response.json()["id"]).order_by("sequence").last()
    assert run is not None and run.is_imported
    return run


def _measured_in_depth(run: Run) -> None:
    """A profile of the run (the hand-made trace's real summary), its GPU telemetry and its server's metrics."""
    summary = trace_summary.summarise(chrome_trace.events((DATA / "sglang_eagle3_tiny.trace.json").read_bytes()))
    ProfileTrace.objects.create(
        run=run, concurrency=1, rank=0, file_name="1765000000.123456-TP-0.trace.json.gz",
        state=ProfileTrace.State.STORED, size_bytes=0, steps=4, trace=b"", summary=summary,
    )  # fmt: skip
    start = timezone.now() - timedelta(minutes=2)
    GpuSample.objects.bulk_create(
        GpuSample(run=run, at=start + timedelta(seconds=i), gpu=gpu, sm_mhz=1980, mem_mhz=3201, temperature_c=60,
                  power_w=450.0, utilization_pct=97, memory_used_mib=120000, reasons=0)
        for i in range(60) for gpu in range(8)
    )  # fmt: skip
    ServerMetricSample.objects.bulk_create(
        ServerMetricSample(run=run, at=start + timedelta(seconds=i / 4), num_running_reqs=4, num_queue_reqs=0,
                           token_usage=0.2, gen_throughput=300.0, spec_accept_length=2.4, spec_accept_rate=0.7,
                           spec_num_steps=2)
        for i in range(120)
    )  # fmt: skip


def _start_study(owner) -> Study:
    client = Client()
    _, token = ApiToken.issue(owner)
    host = make_host(name="study-host")
    body = {
        "name": "tune eagle3", "host": host.name,
        "baseline": {"name": "baseline", "model_path": f"{MODELS}/kimi-k2.5-sim", "tp_size": 8},
        "sweep": {"base": {"model_path": f"{MODELS}/kimi-k2.5-sim", "speculative_algorithm": "EAGLE3",
                           "speculative_draft_model_path": f"{MODELS}/kimi-k2.5-sim-eagle3", "tp_size": 8},
                  "speculative_num_steps": [1, 2], "speculative_eagle_topk": [1]},
        "profile": {"concurrency": [1, 8], "num_prompts": 8, "input_len": 128, "output_len": 128, "passes": 1},
        "budget": {"launches": 6}, "precision": {"within": 0.05}, "round_size": 2, "seed": 1,
    }  # fmt: skip
    response = client.post("/api/studies", body, content_type="application/json",
                           headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert response.status_code == 201, response.content
    return Study.objects.get(pk=response.json()["id"])


@pytest.fixture
def values(browser_user, member, private_queue) -> dict[str, str]:
    """One of each thing a page is about, finished where it can finish: the value of each URL parameter."""
    owner = browser_user
    candidate = make_eagle_config(name="eagle3-2step")
    experiment = make_experiment(name="a long experiment name that would push a narrow page sideways " * 2,
                                 created_by=owner, candidates=[candidate])  # fmt: skip
    for queued in experiment.run_set.select_related("config"):
        finish_run(queued, {1: 83.0 * (1.15 if queued.config.is_speculative else 1.0), 4: 300.0})
    run = experiment.run_set.filter(state=Run.State.SUCCEEDED).first()
    assert run is not None
    _measured_in_depth(run)
    trace = ProfileTrace.objects.get(run=run)
    in_a_thread(
        lambda: do_start_headroom(experiment, config=candidate, accept_lengths=[2.0, 3.0], actor=Actor.command(owner))
    )
    schedule = AdaptiveSchedule.objects.create(
        experiment=experiment, version=1, created_by=owner,
        config_json=json.dumps({"1": {"candidate_steps": [2]}, "4": {"candidate_steps": [0]}}),
        bands=[{"low": 1, "high": 2, "config": candidate.name, "config_id": candidate.pk, "steps": 2},
               {"low": 4, "high": 4, "config": "baseline", "config_id": experiment.baseline_id, "steps": 0}],
    )  # fmt: skip
    # The host as a registered, pinned one shows itself: its key's fingerprint, its host key, its setup, its models
    # and the flags its SGLang lists.
    history_host = make_host(
        name="history-host", ssh_key=make_ssh_key(name="history-key"), host_key=HOST_KEY,
        shell_setup="export PATH=/home/gpu/specdash-checkout/simhost/bin:/home/gpu/specdash-checkout/.venv/bin:$PATH",
        default_env={"NCCL_SOCKET_IFNAME": "enp0s31f6,enp1s0f0np0,enp1s0f1np1"},
        server_flags={"launcher": "python3 -m sglang.launch_server", "sglang_version": "0.5.23",
                      "flags": ["--model-path", "--speculative-adaptive", "--speculative-adaptive-config"]},
        server_flags_at=timezone.now(),
        model_inventory={"models_root": MODELS, "models": [
            {"name": "kimi-k2.5-sim-eagle3-draft-long-name", "path": f"{MODELS}/kimi-k2.5-sim-eagle3-draft-long-name",
             "max_position_embeddings": 262144}]},
        model_inventory_at=timezone.now(),
    )  # fmt: skip
    make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1], host=history_host)
    flag = Flag.objects.get(host=history_host)
    other_run = Run.objects.filter(host=history_host, state=Run.State.SUCCEEDED).first()
    assert other_run is not None
    prompt_set = PromptSet.objects.create(name="chat prompts", kind="upload", content_hash="walk")
    token, _ = ApiToken.issue(owner)
    subscription = Subscription(user=owner, channel="browser", events=["host_dirty"])
    do_subscribe(subscription, Actor(owner))
    imported = in_a_thread(lambda: _imported(owner))
    uid, link_token = urlsafe_base64_encode(force_bytes(member.pk)), default_token_generator.make_token(member)
    return {
        "experiment_id": str(experiment.pk), "run_id": str(run.pk), "config_id": str(candidate.pk),
        "trace_id": str(trace.pk), "study_id": str(_study(owner).pk), "band": "0",
        "host_id": str(flag.host_id), "config_hash": flag.config_hash, "profile_key": flag.profile_key,
        "flag_id": str(flag.pk), "key_id": str(make_ssh_key(name="walk-key").pk),
        "prompt_set_id": str(prompt_set.pk), "token_id": str(token.pk), "user_id": str(member.pk),
        "subscription_id": str(subscription.pk), "other_run_id": str(other_run.pk),
        "other_experiment_id": str(other_run.experiment_id), "schedule_id": str(schedule.pk),
        "imported_experiment_id": str(imported.experiment_id), "imported_run_id": str(imported.pk),
        "uidb64": uid, "token": link_token, "set_password_link": reverse("set_password", args=[uid, link_token]),
    }  # fmt: skip


def _pages(values: dict[str, str], client: Client) -> list[str]:
    """The app's HTML pages: every GET route filled with the world's values (POST-only ones and downloads left)."""
    pages, unfilled, broken = [], [], []
    for route in _patterns(get_resolver()):
        if NOT_WALKED.match(route):
            continue
        names = re.findall(r"<(?:\w+:)?(\w+)>", route)
        if any(name not in values for name in names):
            unfilled.append(route)
            continue
        path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values[m.group(1)], route)
        path += QUERIES.get(route, "").format(**values)
        response = client.get(path)
        if response.status_code == 405:
            continue  # an action (a form's POST target), not a page
        if response.status_code in (301, 302):
            continue  # a GET that only sends the user on (to a page walked on its own)
        if response.status_code != 200:
            broken.append(f"{path} answered {response.status_code}")
        elif response["Content-Type"].startswith("text/html"):
            pages.append(path)
    assert not unfilled, f"the walk has no value for these routes' parameters (add one to `values`): {unfilled}"
    assert not broken, broken
    return pages + [path.format(**values) for path in ALSO]


def test_no_page_scrolls_sideways_at_390_px_in_either_theme_or_breaks_the_policy(
    values, browser_user, log_in, live_web, browser
):
    client = Client()
    client.force_login(browser_user)
    pages = _pages(values, client)
    # The walk reaches the pages it must (a broken classification would walk nothing and pass).
    assert {"/experiments/", f"/experiments/{values['experiment_id']}/", f"/runs/{values['run_id']}/",
            f"/studies/{values['study_id']}/", "/studies/new/", f"/hosts/{values['host_id']}/",
            f"/prompt-sets/{values['prompt_set_id']}/", "/studies/",
            f"/experiments/{values['experiment_id']}/headroom/", f"/schedules/{values['schedule_id']}/",
            f"/experiments/{values['imported_experiment_id']}/", f"/runs/{values['imported_run_id']}/",
            } <= set(pages), pages  # fmt: skip

    problems: list[str] = []
    too_wide: dict[str, list[str]] = {}
    off_theme: list[str] = []
    charts_drawn = 0
    for theme, background in THEMES.items():
        # One context per theme: the login and plotly.js are fetched once per theme, not per page.
        context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme=theme)
        page = context.new_page()
        page.add_init_script(RECORD_REFUSALS)  # a refusal the console does not show (an eval in a try) counts too
        page.on("pageerror", lambda error, page=page: problems.append(f"{page.url}: {error}"))
        page.on("console", lambda m, page=page: problems.append(f"{page.url}: {m.text}")
                if "Content Security Policy" in m.text else None)  # fmt: skip
        try:
            log_in(page)
            for path in pages:
                where = f"{path} ({theme})"
                page.goto(f"{live_web}{path}")
                page.wait_for_load_state("load")
                undrawn = page.evaluate(OPEN_AND_DRAW)
                problems.extend(f"{where}: chart {chart} not drawn" for chart in undrawn)
                charts_drawn += page.locator("main .chart.js-plotly-plot").count()
                problems.extend(f"{where}: refused {what}" for what in page.evaluate("() => window.refused || []"))
                if page.evaluate("getComputedStyle(document.body).backgroundColor") != background:
                    off_theme.append(where)
                if not page.evaluate(NO_SIDEWAYS_SCROLL):
                    too_wide[where] = [str(page.evaluate("document.documentElement.scrollWidth")),
                                       *page.evaluate(STICKING_OUT)]  # fmt: skip
        finally:
            context.close()
    assert not too_wide, f"pages wider than 390 px (their width, what sticks out): {json.dumps(too_wide)}"
    assert not off_theme, f"pages not in the system's theme: {off_theme}"
    assert problems == []
    # The charts were there to draw: the run's telemetry and server metrics, the experiment's, the study's, ...
    assert charts_drawn >= 2 * 10, charts_drawn
