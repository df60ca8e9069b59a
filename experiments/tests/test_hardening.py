"""Hardening of what users' strings reach and of the front door: figures, CSV downloads, the websocket origin,
the API docs, login throttling and the security headers."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from playwright.sync_api import expect

from dashboard.asgi import application
from experiments.analysis import INCONCLUSIVE, ComparisonRow
from experiments.charts.comparison import accept_length_figure, latency_figure, speedup_figure, throughput_figure
from experiments.charts.history import HistoryEntry, history_figure
from experiments.models import ApiToken, Run

from .factories import (
    make_config,
    make_eagle_config,
    make_experiment,
    make_history,
    make_log,
    make_measurement,
    make_run,
)

HOSTILE = ("<img src=x onerror=alert(1)>", "<b>bold</b>", "50%{x}")


def _all_figures(name: str) -> list[dict]:
    row = ComparisonRow(name, 1, 80.0, 90.0, 1.125, 1.1, 1.15, INCONCLUSIVE, 5, 5, None)
    latency = {"config": name, "concurrency": 1}
    latency.update({f"{stat}_{m}": 1.0 for stat in ("mean", "p99") for m in ("ttft_ms", "tpot_ms", "itl_ms")})
    return [
        throughput_figure({name: [(1, 90.0, 88.0, 92.0)], "base": [(1, 80.0, 79.0, 81.0)]}, baseline="base"),
        throughput_figure({name: [(1, 80.0, 79.0, 81.0)]}, baseline=name),
        speedup_figure([row], break_even={name: 1}),
        accept_length_figure({name: [(1, 2.0, 1.9, 2.1)]}),
        latency_figure([latency], baseline=name),
        history_figure(
            {
                1: [
                    HistoryEntry("2026-11-01", name, 88.0, "/runs/1/"),
                    HistoryEntry("2026-11-02", "r", 82.0, "/runs/2/"),
                ]
            },
            [(1, 1, "regression", name)],
            title=f"{name} on {name}",
            pinned=("2026-11-01", name),
        ),
    ]


# The keys whose strings plotly.js shows (`legendgroup` and `customdata` are only matched, never drawn).
SHOWN = {"name", "text", "hovertemplate", "texttemplate", "ticktext"}


def _shown_texts(node, key: str = "") -> list[str]:
    if isinstance(node, dict):
        found = [node["text"]] if key == "title" and isinstance(node.get("text"), str) else []
        return found + [text for k, value in node.items() for text in _shown_texts(value, k)]
    if isinstance(node, list):
        return [text for item in node for text in _shown_texts(item, key)]
    return [node] if isinstance(node, str) and key in SHOWN else []


@pytest.mark.parametrize("name", HOSTILE)
def test_it_escapes_user_names_in_every_text_of_every_figure(name):
    escaped = name.replace("<", "&lt;").replace(">", "&gt;").replace("%", "&#37;")
    for figure in _all_figures(name):
        shown = _shown_texts(json.loads(json.dumps(figure)))
        # plotly.js renders these as (a subset of) HTML and expands `%{...}` in templates and legend names.
        assert not [text for text in shown if name in text], figure
        assert any(escaped in text for text in shown), figure
        assert "<img" not in json.dumps(figure["layout"])


def test_it_keeps_plain_names_readable_in_figures():
    figure = throughput_figure({"eagle3-2step": [(1, 90.0, 88.0, 92.0)]}, baseline="base")
    assert [trace["name"] for trace in figure["data"]] == ["eagle3-2step 95% CI", "eagle3-2step"]
    history = history_figure(
        {1: [HistoryEntry("2026-11-01", "run 1", 88.0, "/runs/1/")]}, [], title="baseline on gpu-1 & co"
    )
    assert history["layout"]["title"]["text"] == "baseline on gpu-1 &amp; co"


def _rows(response) -> list[list[str]]:
    return list(csv.reader(io.StringIO(response.content.decode())))


@pytest.mark.django_db
def test_it_neutralises_formula_cells_in_the_comparison_csv_and_keeps_numbers(owner_client):
    baseline, candidate = make_config(name="baseline"), make_eagle_config(name='=HYPERLINK("http://x")')
    experiment = make_experiment(baseline=baseline, candidates=[candidate], with_runs=False)
    for launch, (base, cand) in enumerate([(100.0, 60.0), (102.0, 61.0)]):
        for config, tok_s in ((baseline, base), (candidate, cand)):
            run = make_run(experiment=experiment, config=config, launch_index=launch, state=Run.State.SUCCEEDED)
            make_measurement(run, concurrency=1, output_throughput=tok_s)

    (header, row) = _rows(owner_client.get(f"/experiments/{experiment.pk}/export.csv"))

    cells = dict(zip(header, row, strict=True))
    assert cells["candidate"] == '\'=HYPERLINK("http://x")'
    assert float(cells["speedup"]) == pytest.approx(0.5983, abs=1e-3)  # a number, written as one


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["=1+2", "+1", "-1+cmd", "@SUM(A1)", "\tx", "\rx"])
def test_it_neutralises_formula_cells_in_the_flags_csv(owner_client, name):
    make_history(
        [88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1], config=make_config(name=name)
    )

    header, row = _rows(owner_client.get("/flags/export.csv?state=all"))

    cells = dict(zip(header, row, strict=True))
    assert cells["config"] == "'" + name
    assert cells["change"].startswith("-0.07")  # a genuine negative number stays a number
    float(cells["change"])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "filename"),
    [
        ("?state=open", "flags-open.csv"),
        ("?state=untriaged", "flags-untriaged.csv"),
        ("", "flags-all.csv"),
        ('?state=x"; filename="evil.exe', "flags-all.csv"),
        ("?state=%0d%0aSet-Cookie:%20a=b", "flags-all.csv"),
    ],
)
def test_it_names_the_flags_download_only_after_a_known_state(owner_client, query, filename):
    response = owner_client.get(f"/flags/export.csv{query}")

    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="{filename}"'
    assert "Set-Cookie" not in response.headers or "a=b" not in response["Set-Cookie"]


async def _handshake(headers: list[tuple[bytes, bytes]]) -> tuple[bool, int | None]:
    """Connect anonymously: a handshake the origin check lets through is refused by the consumer with 4403,
    one it stops is closed by the origin check's denier with the default code."""
    communicator = WebsocketCommunicator(application, "/ws/experiments/1/", headers=headers)
    connected, code = await communicator.connect(timeout=5)
    await communicator.disconnect()
    return connected, code


PASSED_ORIGIN_CHECK = (False, 4403)
DENIED = (False, 1000)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("host", "origin", "extra", "expected"),
    [
        (b"127.0.0.1:8000", b"http://127.0.0.1:8000", [], PASSED_ORIGIN_CHECK),
        (b"localhost:8000", b"http://localhost:8000", [], PASSED_ORIGIN_CHECK),
        (b"127.0.0.1:8000", b"http://127.0.0.1:8001", [], DENIED),  # same host, another port
        (b"127.0.0.1:8000", b"http://127.0.0.1", [], DENIED),  # same host, the default port
        (b"127.0.0.1:8000", b"https://127.0.0.1:8000", [], DENIED),  # another scheme
        (b"127.0.0.1:8000", b"http://localhost:8000", [], DENIED),  # another allowed host is another site
        (b"127.0.0.1:8000", b"http://evil.example:8000", [], DENIED),
        (b"evil.example:8000", b"http://evil.example:8000", [], DENIED),  # a Host outside ALLOWED_HOSTS
        (b"127.0.0.1:8000", b"null", [], DENIED),
        (b"127.0.0.1:8000", None, [], DENIED),
        # Behind a TLS proxy (SECURE_PROXY_SSL_HEADER): the page is https, the proxy says so.
        (b"localhost", b"https://localhost", [(b"x-forwarded-proto", b"https")], PASSED_ORIGIN_CHECK),
        (b"localhost", b"http://localhost", [(b"x-forwarded-proto", b"https")], DENIED),
        (b"localhost", b"https://localhost", [], DENIED),
        # No Host header (never a browser's handshake): only an allowed host at the scheme's default port.
        (None, b"http://127.0.0.1", [], PASSED_ORIGIN_CHECK),
        (None, b"http://127.0.0.1:8000", [], DENIED),
        (None, b"http://evil.example", [], DENIED),
    ],
)
async def test_it_accepts_websockets_only_from_the_sites_own_origin(settings, host, origin, extra, expected):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    headers = ([(b"host", host)] if host else []) + extra + ([(b"origin", origin)] if origin else [])

    assert await _handshake(headers) == expected


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        (b"https://dash.example.com", PASSED_ORIGIN_CHECK),
        (b"https://dash.example.com:8443", DENIED),
        (b"http://dash.example.com", DENIED),
        (b"https://team.example.org", PASSED_ORIGIN_CHECK),  # a wildcard entry
        (b"https://example.org.evil.example", DENIED),
    ],
)
async def test_it_accepts_websockets_from_csrf_trusted_origins(settings, origin, expected):
    settings.CSRF_TRUSTED_ORIGINS = ["https://dash.example.com", "https://*.example.org"]

    assert await _handshake([(b"host", b"127.0.0.1:8000"), (b"origin", origin)]) == expected


@pytest.mark.django_db
def test_it_serves_the_api_docs_with_no_asset_from_another_host(owner_client):
    response = owner_client.get("/api/docs")

    assert response.status_code == 200
    page = response.content.decode()
    references = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert any(ref.endswith(".js") and "swagger-ui-bundle" in ref for ref in references), references
    assert any(ref.endswith(".css") and "swagger-ui" in ref for ref in references), references
    assert all(ref.startswith("/") and not ref.startswith("//") for ref in references), references
    # No CDN named anywhere a browser would fetch from (a random CSRF token may hold the letters "cdn").
    assert not re.search(r"//[^\s\"'<>]*cdn", page.lower())
    for ref in references:
        assert owner_client.get(ref).status_code == 200, ref


@pytest.fixture
def login_user(django_user_model) -> User:
    return django_user_model.objects.create_user("alice", password="right-pass")


def _log_in(client: Client, password: str, username: str = "alice", address: str = "10.1.1.1"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.mark.django_db
def test_it_locks_a_login_out_after_repeated_failures_with_a_clear_message(client, login_user, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = _log_in(client, "wrong")
        assert response.status_code == 200  # the form again, with the usual error
        assert b"Too many failed logins" not in response.content

    response = _log_in(client, "wrong")

    assert response.status_code == 429
    page = response.content.decode()
    assert "Too many failed logins for this username from your address. Try again in 15 minutes" in page
    assert 'name="username"' in page and 'value="alice"' in page  # the login form again
    # Locked out: even the right password is refused until the cool-off ends.
    assert _log_in(client, "right-pass").status_code == 429
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_it_locks_out_only_that_username_from_that_address(client, login_user, django_user_model, settings):
    django_user_model.objects.create_user("bob", password="bob-pass")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _log_in(client, "wrong")

    assert _log_in(Client(), "right-pass", address="10.2.2.2").status_code == 302  # alice, elsewhere
    assert _log_in(Client(), "bob-pass", username="bob").status_code == 302  # bob, from the same address


@pytest.mark.django_db
def test_it_locks_an_account_guessed_at_from_many_addresses(login_user, django_user_model, settings):
    # Each address stays under its own limit; together they pass the account's.
    assert settings.SPECDASH_LOGIN_ACCOUNT_FAILURE_LIMIT > settings.AXES_FAILURE_LIMIT
    per_address = settings.AXES_FAILURE_LIMIT - 1
    django_user_model.objects.create_user("bob", password="bob-pass")
    addresses = [f"10.9.{n // 250}.{n % 250 + 1}" for n in range(settings.SPECDASH_LOGIN_ACCOUNT_FAILURE_LIMIT)]
    answers = [
        _log_in(Client(), "wrong", address=address).status_code
        for address in addresses[: settings.SPECDASH_LOGIN_ACCOUNT_FAILURE_LIMIT // per_address + 1]
        for _ in range(per_address)
    ]
    tries = settings.SPECDASH_LOGIN_ACCOUNT_FAILURE_LIMIT
    # The failure that reaches the account's limit is the first answered as a lockout.
    assert answers[: tries - 1] == [200] * (tries - 1) and set(answers[tries - 1 :]) == {429}

    # The right password, from an address never seen, is refused too, saying why, until the cool-off ends.
    fresh = _log_in(client := Client(), "right-pass", address="192.0.2.7")
    assert fresh.status_code == 429 and "_auth_user_id" not in client.session
    assert "Too many failed logins for this username, from several addresses. Try again in 15 minutes" in (
        fresh.content.decode()
    )
    assert _log_in(Client(), "bob-pass", username="bob", address=addresses[0]).status_code == 302  # others log in

    AccessAttempt.objects.update(attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1))
    assert _log_in(Client(), "right-pass", address="192.0.2.7").status_code == 302


@pytest.mark.django_db
def test_it_keeps_the_account_open_below_its_limit(login_user, settings):
    # As many failures as the account allows less one, over addresses: the user still logs in, from anywhere.
    for n in range(settings.SPECDASH_LOGIN_ACCOUNT_FAILURE_LIMIT - 1):
        assert _log_in(Client(), "wrong", address=f"10.8.0.{n + 1}").status_code == 200

    assert _log_in(Client(), "right-pass", address="192.0.2.8").status_code == 302


@pytest.mark.django_db
def test_it_forgets_failures_after_a_successful_login(client, login_user, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _log_in(client, "wrong")
    assert _log_in(client, "right-pass").status_code == 302
    client.logout()

    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _log_in(client, "wrong").status_code == 200


@pytest.mark.django_db
def test_it_throttles_no_session_login_of_tests_nor_api_tokens(client, login_user, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _log_in(client, "wrong", address="127.0.0.1")
    _, token = ApiToken.issue(login_user)

    api = Client().get("/api/hosts", headers={"Authorization": f"Bearer {token}"}, REMOTE_ADDR="127.0.0.1")
    forced = Client()
    forced.force_login(login_user)

    assert api.status_code in (200, 403)  # the token authenticates (403: a user in no role)
    assert forced.get("/tokens/").status_code != 429
    assert forced.session["_auth_user_id"] == str(login_user.pk)
    assert Client().get("/api/hosts", headers={"Authorization": "Bearer wrong"}).status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/login/", "/api/docs", "/"])
def test_it_sends_the_security_headers_on_every_page(owner_client, path):
    response = owner_client.get(path)

    # Enforced in every mode (production: dashboard/tests/test_settings.py boots it), never only reported.
    assert "Content-Security-Policy-Report-Only" not in response
    # django-csp writes the directives in no fixed order, so compare them as a mapping.
    header = response["Content-Security-Policy"]
    policy = dict(directive.strip().split(" ", 1) for directive in header.split(";") if directive.strip())
    assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'"  # no 'unsafe-eval', no inline
    assert policy["frame-ancestors"] == "'none'" and policy["object-src"] == "'none'"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"
    assert response["Referrer-Policy"] == "same-origin"


def test_no_template_has_an_inline_script_or_event_handler():
    # The policy allows only the site's own script files: an inline script or handler would silently not run.
    from pathlib import Path

    templates = Path(__file__).resolve().parents[2] / "templates"
    for path in templates.rglob("*.html"):
        text = path.read_text()
        for tag in re.findall(r"<script\b[^>]*>", text):
            assert "src=" in tag or 'type="application/json"' in tag, (path, tag)
        assert not re.search(r"\son[a-z]+\s*=", text), path


@pytest.mark.django_db
def test_it_hands_the_page_figures_with_escaped_names(owner_client):
    baseline, candidate = make_config(name="base<b>"), make_eagle_config(name=HOSTILE[0])
    experiment = make_experiment(baseline=baseline, candidates=[candidate], with_runs=False)
    for launch in range(2):
        for config, tok_s in ((baseline, 100.0 + launch), (candidate, 120.0 + launch)):
            run = make_run(experiment=experiment, config=config, launch_index=launch, state=Run.State.SUCCEEDED)
            make_measurement(run, concurrency=1, output_throughput=tok_s)

    page = owner_client.get(f"/experiments/{experiment.pk}/").content.decode()

    scripts = re.findall(r'<script id="([a-z-]+-figure)" type="application/json">(.*?)</script>', page, re.S)
    assert {name for name, _ in scripts} >= {"throughput-figure", "speedup-figure", "latency-figure"}
    for _, data in scripts:
        shown = _shown_texts(json.loads(data))  # what plotly.js draws
        assert not [text for text in shown if "<img" in text or "<b>" in text]
        assert any("&lt;img src=x onerror=alert(1)&gt;" in text for text in shown)


def _watch(page, live_web: str) -> tuple[list[str], list[str]]:
    """Record the page's CSP violations and script errors, and every request that leaves the server."""
    problems: list[str] = []
    outside: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("request", lambda r: None if r.url.startswith((live_web, "data:", "blob:")) else outside.append(r.url))
    return problems, outside


@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_it_draws_the_comparison_under_the_policy_with_names_as_text(browser_user, log_in, live_web, browser):
    baseline, candidate = make_config(name="baseline"), make_eagle_config(name=HOSTILE[0])
    experiment = make_experiment(baseline=baseline, candidates=[candidate], with_runs=False)
    for launch in range(2):
        for config, tok_s in ((baseline, 100.0 + launch), (candidate, 120.0 + launch)):
            run = make_run(experiment=experiment, config=config, launch_index=launch, state=Run.State.SUCCEEDED)
            make_measurement(run, concurrency=1, output_throughput=tok_s)
    page = browser.new_context().new_page()
    problems, outside = _watch(page, live_web)
    log_in(page)

    page.goto(f"{live_web}{experiment.get_absolute_url()}")

    # The charts are drawn as they scroll into view; the throughput chart sits below the verdict cards.
    page.locator("#throughput-chart").scroll_into_view_if_needed()
    page.wait_for_selector("#throughput-chart .legend", timeout=15_000)
    legend = page.locator("#throughput-chart .legend").text_content() or ""
    assert HOSTILE[0] in legend  # shown as the text it is
    assert page.locator("#throughput-chart img, #speedup-chart img").count() == 0
    assert problems == [] and outside == []


@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_it_streams_a_run_log_over_the_websocket_within_the_policy(browser_user, log_in, live_web, browser):
    run = make_run(state=Run.State.SUCCEEDED)
    make_log(run, [["loading", "ready"], ["<b>served</b>"]])
    page = browser.new_context().new_page()
    problems, outside = _watch(page, live_web)
    log_in(page)

    page.goto(f"{live_web}/runs/{run.pk}/")

    expect(page.locator("#line-count")).to_have_text("3", timeout=15_000)  # replayed over the websocket
    expect(page.locator("#log .line").last).to_contain_text("<b>served</b>")
    assert problems == [] and outside == []


@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_it_renders_the_api_docs_from_this_server_alone(live_web, browser, log_in):
    page = browser.new_context().new_page()
    log_in(page)  # the docs and the schema need a login, as the API does
    problems, outside = _watch(page, live_web)

    page.goto(f"{live_web}/api/docs")

    page.wait_for_selector(".opblock", timeout=15_000)
    assert page.locator(".opblock").count() >= 10  # every operation of the API is listed
    assert problems == [] and outside == []
