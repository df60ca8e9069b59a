"""The team in a real browser, on a phone's screen in the dark theme, under the enforced CSP: an admin adds a
teammate from the Team page and hands over the set-password link; the teammate sets a password with it, logs in
and submits an experiment. A viewer who opens a member's page, or anyone a missing one, meets the site's own page
with the navigation and a way back."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from experiments import roles
from experiments.models import AuditEvent, Experiment

from .factories import make_host
from .test_browser_policy import RECORD_REFUSALS

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PHONE = {"viewport": {"width": 390, "height": 844}, "color_scheme": "dark"}
NO_SIDEWAYS_SCROLL = "document.documentElement.scrollWidth <= window.innerWidth"
DARK_BODY = "rgb(12, 17, 29)"
PASSWORD = "Tr0ub4dor&3-horse"


def _watched(browser):
    """A page on a phone in the dark theme, whose policy refusals and script errors are collected."""
    page = browser.new_context(**PHONE).new_page()
    page.add_init_script(RECORD_REFUSALS)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"{page.url}: {error}"))
    page.on("console", lambda m: problems.append(f"{page.url}: {m.text}") if "Content Security" in m.text else None)
    return page, problems


def _fits(page) -> None:
    assert page.evaluate(NO_SIDEWAYS_SCROLL), page.evaluate("document.documentElement.scrollWidth")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == DARK_BODY
    assert page.evaluate("() => window.refused || []") == []


def test_an_admin_adds_a_teammate_who_sets_a_password_logs_in_and_submits(log_in, live_web, browser):
    host = make_host(name="team-gpu")
    admin, problems = _watched(browser)
    log_in(admin)
    admin.goto(f"{live_web}/")
    admin.click("#menu-button")  # the navigation folds behind it on a phone
    admin.click("#nav-more summary")
    admin.click("#nav-more a:text('Team')")
    admin.wait_for_url(f"{live_web}/team/")
    _fits(admin)

    admin.fill("#id_username", "newcomer")
    admin.fill("#id_email", "newcomer@example.org")
    admin.select_option("#id_role", "member")
    admin.click("#add-teammate-button")
    admin.wait_for_selector("#password-link")
    _fits(admin)
    assert "newcomer joins as member." in admin.inner_text("#link-sentence")
    link = admin.inner_text("#password-link")
    assert link.startswith(f"{live_web}/password/")
    admin.click("text=Back to the team")
    assert "newcomer" in admin.inner_text("#users")

    teammate, more_problems = _watched(browser)
    teammate.goto(link)
    teammate.wait_for_url("**/set-password/")  # the token is out of the address before anything loads
    _fits(teammate)
    teammate.fill("#id_new_password1", "newcomer2026")
    teammate.fill("#id_new_password2", "newcomer2026")
    teammate.click("button[type=submit]")
    assert "too similar to the username" in teammate.inner_text(".errors")
    teammate.fill("#id_new_password1", PASSWORD)
    teammate.fill("#id_new_password2", PASSWORD)
    teammate.click("button[type=submit]")
    teammate.wait_for_url(f"{live_web}/login/")
    assert "Your password is set, newcomer: log in with it." in teammate.inner_text(".message.success")

    teammate.fill("#id_username", "newcomer")
    teammate.fill("#id_password", PASSWORD)
    teammate.click("button[type=submit]")
    teammate.wait_for_url(f"{live_web}/")
    assert "(member)" in teammate.inner_text(".logout")
    teammate.goto(f"{live_web}/experiments/new/")
    teammate.fill("#id_experiment-name", "newcomer's first experiment")
    teammate.select_option("#id_experiment-host", host.name)
    teammate.click("button[type=submit].primary")
    teammate.wait_for_url("**/experiments/*/")

    newcomer = get_user_model().objects.get(username="newcomer")
    experiment = Experiment.objects.get(name="newcomer's first experiment")
    assert experiment.created_by == newcomer and roles.role_of(newcomer) == roles.MEMBER
    assert experiment.run_set.count() >= 2  # queued (the runs wait in a queue no worker here reads)
    done = AuditEvent.objects.filter(target_type="user", target_id=newcomer.pk).order_by("at", "id")
    assert [(e.action, e.actor_name) for e in done] == [
        ("user.add", "owner"),
        ("user.password_set", "newcomer"),
        ("user.login", "newcomer"),
    ]
    assert problems == more_problems == []


def test_a_viewer_meets_the_styled_403_and_anyone_the_styled_404_on_a_phone(live_web, browser, viewer):
    page, problems = _watched(browser)
    client = Client()
    client.force_login(viewer)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_web, "httpOnly": True}])

    forbidden = page.goto(f"{live_web}/experiments/new/")

    assert forbidden is not None and forbidden.status == 403
    assert page.inner_text("h1") == "You may not open this page"
    assert "Your role, viewer, does not allow it" in page.inner_text("#error-sentence")
    _fits(page)
    page.click("#menu-button")
    assert page.locator("#main-nav a:text('Experiments')").is_visible()
    page.click("#error-back")
    page.wait_for_url(f"{live_web}/")

    missing = page.goto(f"{live_web}/experiments/987654321/a-long-address-that-does-not-exist-anywhere-at-all/")

    assert missing is not None and missing.status == 404
    assert page.inner_text("h1") == "No such page"
    _fits(page)
    assert problems == []
