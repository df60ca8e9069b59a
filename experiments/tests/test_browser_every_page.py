"""Every page of the app at 390 px in the dark theme, under the enforced CSP: no sideways scroll, dark, no policy
violation, no script error. The pages are the URL patterns themselves, so a new page is walked without anyone
adding it here; a pattern whose parameter the walk cannot fill fails the test, naming it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from experiments.actions.audit import Actor
from experiments.actions.headroom import do_start_headroom
from experiments.actions.notifications import do_subscribe
from experiments.models import AdaptiveSchedule, ApiToken, Flag, ProfileTrace, PromptSet, Run, Study, Subscription
from experiments.tests.waiting import in_a_thread

from .factories import MODELS, finish_run, make_eagle_config, make_experiment, make_history, make_host, make_ssh_key
from .test_browser_policy import RECORD_REFUSALS

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NO_SIDEWAYS_SCROLL = "document.documentElement.scrollWidth <= window.innerWidth"
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
    trace = ProfileTrace.objects.create(
        run=run, concurrency=1, rank=0, file_name="p-TP-0.trace.json.gz", state=ProfileTrace.State.STORED,
        size_bytes=0, steps=4, trace=b"", summary={"speculative": True, "by_batch_size": []},
    )  # fmt: skip
    in_a_thread(
        lambda: do_start_headroom(experiment, config=candidate, accept_lengths=[2.0, 3.0], actor=Actor.command(owner))
    )
    schedule = AdaptiveSchedule.objects.create(
        experiment=experiment, version=1, created_by=owner,
        config_json=json.dumps({"1": {"candidate_steps": [2]}, "4": {"candidate_steps": [0]}}),
        bands=[{"low": 1, "high": 2, "config": candidate.name, "config_id": candidate.pk, "steps": 2},
               {"low": 4, "high": 4, "config": "baseline", "config_id": experiment.baseline_id, "steps": 0}],
    )  # fmt: skip
    history_host = make_host(name="history-host")
    make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1], host=history_host)
    flag = Flag.objects.get(host=history_host)
    other_run = Run.objects.filter(host=history_host, state=Run.State.SUCCEEDED).first()
    assert other_run is not None
    prompt_set = PromptSet.objects.create(name="chat prompts", kind="upload", content_hash="walk")
    token, _ = ApiToken.issue(owner)
    subscription = Subscription(user=owner, channel="browser", events=["host_dirty"])
    do_subscribe(subscription, Actor(owner))
    return {
        "experiment_id": str(experiment.pk), "run_id": str(run.pk), "config_id": str(candidate.pk),
        "trace_id": str(trace.pk), "study_id": str(_study(owner).pk), "band": "0",
        "host_id": str(flag.host_id), "config_hash": flag.config_hash, "profile_key": flag.profile_key,
        "flag_id": str(flag.pk), "key_id": str(make_ssh_key(name="walk-key").pk),
        "prompt_set_id": str(prompt_set.pk), "token_id": str(token.pk), "user_id": str(member.pk),
        "subscription_id": str(subscription.pk), "other_run_id": str(other_run.pk),
        "other_experiment_id": str(other_run.experiment_id), "schedule_id": str(schedule.pk),
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
    return pages


def test_no_page_scrolls_sideways_at_390_px_or_breaks_the_policy(values, browser_user, log_in, live_web, browser):
    client = Client()
    client.force_login(browser_user)
    pages = _pages(values, client)
    # The walk reaches the pages it must (a broken classification would walk nothing and pass).
    assert {"/experiments/", f"/experiments/{values['experiment_id']}/", f"/runs/{values['run_id']}/",
            f"/studies/{values['study_id']}/", "/studies/new/", f"/hosts/{values['host_id']}/",
            f"/prompt-sets/{values['prompt_set_id']}/", "/studies/",
            f"/experiments/{values['experiment_id']}/headroom/", f"/schedules/{values['schedule_id']}/"
            } <= set(pages), pages  # fmt: skip

    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
    page = context.new_page()
    page.add_init_script(RECORD_REFUSALS)  # a refusal the console does not show (an eval in a try) counts too
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"{page.url}: {error}"))
    page.on(
        "console", lambda m: problems.append(f"{page.url}: {m.text}") if "Content Security Policy" in m.text else None
    )
    too_wide: dict[str, list[str]] = {}
    light: list[str] = []
    try:
        log_in(page)
        for path in pages:
            page.goto(f"{live_web}{path}")
            page.wait_for_load_state("load")
            problems += [f"{path}: refused {what}" for what in page.evaluate("() => window.refused || []")]
            # Dark: the page's background is the dark one, from the system setting.
            if page.evaluate("getComputedStyle(document.body).backgroundColor") != "rgb(12, 17, 29)":
                light.append(path)
            if not page.evaluate(NO_SIDEWAYS_SCROLL):
                too_wide[path] = [str(page.evaluate("document.documentElement.scrollWidth")),
                                  *page.evaluate(STICKING_OUT)]  # fmt: skip
    finally:
        context.close()
    assert not too_wide, f"pages wider than 390 px (their width, what sticks out): {json.dumps(too_wide)}"
    assert not light, f"pages not dark in a dark system theme: {light}"
    assert problems == []
