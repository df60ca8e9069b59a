"""Browser notifications in a real browser: a page of a user who allowed them shows what happens meanwhile."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from experiments.actions.audit import Actor
from experiments.actions.hosts import do_mark_host_dirty
from experiments.actions.notifications import do_subscribe
from experiments.models import Subscription

from .factories import make_host

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _mark_dirty(host) -> None:
    with transaction.atomic():
        do_mark_host_dirty(host, "pid 9 still holds 512 MiB")
    connection.close()


def test_an_open_page_shows_a_notification_once_allowed(browser, live_web, log_in, browser_user):
    do_subscribe(Subscription(user=browser_user, channel="browser", events=["host_dirty"]), Actor(browser_user))
    context = browser.new_context(permissions=["notifications"])
    page = context.new_page()
    try:
        log_in(page)
        page.goto(f"{live_web}/notifications/")
        assert "shows specdash notifications" in page.inner_text("#browser-notifications-status")
        page.goto(f"{live_web}/")  # any page listens
        page.evaluate(
            """() => { window.seen = [];
                       document.addEventListener("specdash:notification", e => window.seen.push(e.detail)); }"""
        )
        page.wait_for_timeout(500)  # the page's websocket connects

        host = make_host(name="gpu-<b>4</b>")
        # (In another thread: Playwright's event loop runs in this one, and the broadcast after the commit is sync.)
        teardown = threading.Thread(target=_mark_dirty, args=(host,))
        teardown.start()
        teardown.join()

        page.wait_for_function("() => window.seen.length > 0", timeout=10_000)
        shown = page.evaluate("() => window.seen[0]")
        assert (
            shown["title"]
            == "[specdash] Host gpu-<b>4</b> is dirty: no run launches there until someone marks it clean"
        )
        assert "pid 9 still holds 512 MiB" in shown["body"]
    finally:
        context.close()
