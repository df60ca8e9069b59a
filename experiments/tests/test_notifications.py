"""Notifications: who may subscribe to what, which events tell whom (once, after the commit), what the messages
say, and delivery by e-mail (Django's locmem backend), to a local webhook receiver and to open browser pages."""

from __future__ import annotations

import time

import pytest
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.urls import reverse

from dashboard.asgi import application
from experiments.actions.audit import Actor
from experiments.actions.hosts import do_mark_host_dirty
from experiments.actions.notifications import do_subscribe
from experiments.actions.runs import do_advance_run, do_cancel_run
from experiments.formats import notification_texts
from experiments.models import AuditEvent, Delivery, Event, Flag, Run, Subscription, Suspicion
from experiments.reads.reports import build_report
from experiments.rules import webhook_targets

from .factories import finish_run, make_eagle_config, make_experiment, make_history, make_host, make_measurement


def _subscribe(user, channel: str, events: list[str], *, team: bool = False, target: str = "", only_mine=False):
    subscription = Subscription(
        user=None if team else user, channel=channel, events=events, target=target, only_mine=only_mine
    )
    return do_subscribe(subscription, Actor(user))


def _finish(run: Run, state: str = Run.State.SUCCEEDED) -> None:
    with transaction.atomic():
        do_advance_run(run, state)


def _with_email(user, address: str):
    user.email = address
    user.save()
    return user


# ---- what messages say ----------------------------------------------------------------------------------------


def test_a_webhook_message_escapes_slacks_control_characters():
    message = notification_texts.host_dirty(
        event=Event.HOST_DIRTY, host="gpu-<!channel>&1", reason="pid 7 holds <b>", url="http://x/hosts/1/"
    )

    text = message.webhook_json()["text"]

    assert "<!channel>" not in text and "&lt;!channel&gt;&amp;1" in text
    assert "&lt;b&gt;" in text
    assert text.endswith("<http://x/hosts/1/|Open in specdash>")


def test_a_subject_is_one_bounded_line_whatever_the_name():
    message = notification_texts.experiment_ended(
        event=Event.EXPERIMENT_FINISHED,
        name="evil\r\nBcc: everyone@example.org " + "x" * 500,
        owner="o",
        host="h",
        failed_runs=0,
        runs=2,
        verdicts=[],
        url="http://x/",
    )

    assert "\n" not in message.subject and "\r" not in message.subject
    assert len(message.subject) <= notification_texts.MAX_SUBJECT
    assert message.subject.startswith("[specdash] Experiment evil Bcc")


# ---- who may subscribe to what ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_viewer_subscribes_to_e_mail_at_their_own_address_only(client, viewer):
    _with_email(viewer, "viewer@example.org")
    client.force_login(viewer)

    response = client.post(
        reverse("notification_settings"),
        {"channel": "email", "events": ["experiment_finished", "flag_raised"], "target": "attacker@example.org"},
    )

    assert response.status_code == 302
    subscription = Subscription.objects.get()
    assert subscription.user == viewer and subscription.target == ""
    assert subscription.destination() == "viewer@example.org"
    assert AuditEvent.objects.filter(action=AuditEvent.Action.SUBSCRIBE, actor=viewer).exists()


@pytest.mark.django_db
def test_an_e_mail_subscription_needs_an_address_on_the_account(client, member):
    client.force_login(member)

    response = client.post(reverse("notification_settings"), {"channel": "email", "events": ["flag_raised"]})

    assert response.status_code == 400
    assert "no e-mail address" in response.content.decode()
    assert not Subscription.objects.exists()

    # The page lets them set it: a bad one refused and nothing changed, then a good one, then the subscription.
    refused = client.post(reverse("set_email"), {"email": "not an address"}, follow=True)
    member.refresh_from_db()
    assert "valid email address" in refused.content.decode() and member.email == ""
    client.post(reverse("set_email"), {"email": "member@example.org"})
    member.refresh_from_db()
    assert member.email == "member@example.org"
    page = client.get(reverse("notification_settings")).content.decode()
    assert 'value="member@example.org"' in page
    subscribed = client.post(reverse("notification_settings"), {"channel": "email", "events": ["flag_raised"]})
    assert subscribed.status_code == 302 and Subscription.objects.get().user == member
    assert client.get(reverse("set_email")).status_code == 405


@pytest.mark.django_db
def test_a_member_cannot_add_a_webhook(client, member):
    client.force_login(member)

    response = client.post(
        reverse("notification_settings"),
        {"channel": "webhook", "events": ["flag_raised"], "team": "on", "target": "http://10.0.0.1/internal"},
    )

    assert response.status_code == 400
    assert not Subscription.objects.exists()


@pytest.mark.django_db
def test_an_admin_adds_a_team_webhook_with_a_checked_url(client, owner, settings, monkeypatch):
    client.force_login(owner)
    url = reverse("notification_settings")
    bad = client.post(url, {"channel": "webhook", "events": ["flag_raised"], "team": "on", "target": "file:///etc/x"})
    plain = client.post(
        url, {"channel": "webhook", "events": ["flag_raised"], "team": "on", "target": "http://hooks.slack.com/T/B/x"}
    )
    settings.SPECDASH_WEBHOOK_HOSTS = ("hooks.slack.com",)
    fake_dns = {"hooks.slack.com": ["3.33.200.10"]}  # a public address (no DNS in the test's sandbox)
    monkeypatch.setattr(webhook_targets, "resolve", lambda host, port: fake_dns.get(host, []))
    elsewhere = client.post(
        url, {"channel": "webhook", "events": ["flag_raised"], "team": "on", "target": "https://evil.example/x"}
    )
    good = client.post(
        url, {"channel": "webhook", "events": ["flag_raised"], "team": "on", "target": "https://hooks.slack.com/T/B/x"}
    )

    assert bad.status_code == 400 and "Enter an https:// URL." in bad.content.decode()
    assert plain.status_code == 400 and "Enter an https:// URL." in plain.content.decode()
    assert elsewhere.status_code == 400 and "may only point at hooks.slack.com" in elsewhere.content.decode()
    assert good.status_code == 302
    subscription = Subscription.objects.get()
    assert subscription.is_team and subscription.target == "https://hooks.slack.com/T/B/x"


@pytest.mark.django_db
def test_only_its_owner_or_an_admin_removes_a_subscription(client, member, viewer, owner):
    mine = _subscribe(member, "browser", ["flag_raised"])
    team = _subscribe(owner, "webhook", ["flag_raised"], team=True, target="https://hooks.example/x")

    client.force_login(viewer)
    assert client.post(reverse("unsubscribe_notification", args=[mine.pk])).status_code == 403
    client.force_login(member)
    assert client.post(reverse("unsubscribe_notification", args=[team.pk])).status_code == 403
    assert client.post(reverse("unsubscribe_notification", args=[mine.pk])).status_code == 302
    client.force_login(owner)
    assert client.post(reverse("unsubscribe_notification", args=[team.pk])).status_code == 302

    assert not Subscription.objects.exists()
    assert AuditEvent.objects.filter(action=AuditEvent.Action.UNSUBSCRIBE).count() == 2


@pytest.mark.django_db
def test_an_outsider_has_no_notifications_page(client, outsider):
    client.force_login(outsider)

    assert client.get(reverse("notification_settings")).status_code == 403


@pytest.mark.django_db
def test_the_page_shows_names_and_errors_escaped(client, owner):
    _subscribe(owner, "webhook", ["host_dirty"], team=True, target="https://hooks.example/x")
    host = make_host(name="h<script>x</script>")
    with transaction.atomic():
        do_mark_host_dirty(host, "pid 1 <img src=x onerror=alert(1)>")
    Delivery.objects.update(last_error="<script>alert(2)</script>")
    client.force_login(owner)

    page = client.get(reverse("notification_settings")).content.decode()

    assert "<script>alert(2)" not in page and "&lt;script&gt;alert(2)" in page
    assert "<script>x</script>" not in page


# ---- which events tell whom ----------------------------------------------------------------------------------


def report_said(experiment) -> str:
    comparison = build_report(experiment, with_figures=False).comparison
    return comparison.said(comparison.rows[0])


@pytest.mark.django_db
def test_an_experiment_that_ends_tells_its_subscribers_once(owner, member, viewer):
    experiment = make_experiment(created_by=member)
    _subscribe(_with_email(member, "member@example.org"), "email", ["experiment_finished"], only_mine=True)
    _subscribe(_with_email(viewer, "viewer@example.org"), "email", ["experiment_finished"], only_mine=True)
    _subscribe(owner, "email", ["experiment_finished"], team=True, target="team@example.org")
    _subscribe(owner, "email", ["experiment_failed"], team=True, target="failures@example.org")
    first, second = experiment.run_set.order_by("sequence")
    for pass_index, (base, spec) in enumerate([(88.0, 101.0), (90.0, 103.0)]):
        make_measurement(first, concurrency=1, output_throughput=base, pass_index=pass_index)
        make_measurement(second, concurrency=1, output_throughput=spec, pass_index=pass_index)

    _finish(first)
    assert not Delivery.objects.exists()  # a run is still queued
    _finish(second)
    do_advance_run(second, Run.State.SUCCEEDED)  # told again of the same end: nothing new

    deliveries = Delivery.objects.order_by("destination")
    assert [d.destination for d in deliveries] == ["member@example.org", "team@example.org"]
    assert {d.event for d in deliveries} == {Event.EXPERIMENT_FINISHED}
    assert deliveries[0].subject == f"[specdash] Experiment {experiment.name} finished"
    assert deliveries[0].url.endswith(f"/experiments/{experiment.pk}/")
    candidate = experiment.ordered_candidates()[0].name
    # The verdict lines say each row as the verdict table does (analysis.ratio_text), with its verdict.
    assert f"- {candidate} at c=1: {report_said(experiment)}, faster" in deliveries[0].body
    # It leads with the experiment page's card: the same sentence, first.
    report = build_report(experiment, with_figures=False)
    assert deliveries[0].body.startswith(report.cards[0].sentence + "\n\nExperiment: ")


@pytest.mark.django_db
def test_a_simulated_acceptance_verdict_is_told_as_such(owner):
    simulated = make_eagle_config(name="eagle3 · AL 3", env={"SGLANG_SIMULATE_ACC_LEN": "3"})
    experiment = make_experiment(created_by=owner, candidates=[simulated])
    _subscribe(_with_email(owner, "owner@example.org"), "email", ["experiment_finished"])
    for run, tok_s in zip(experiment.run_set.order_by("sequence"), (88.0, 130.0), strict=True):
        make_measurement(run, concurrency=1, output_throughput=tok_s)
        _finish(run)

    body = Delivery.objects.get().body

    assert body.startswith("(simulated acceptance: speed only) eagle3 · AL 3 ")
    assert "- (simulated acceptance: speed only) eagle3 · AL 3 at c=1: 1.48x, no interval, inconclusive" in body


@pytest.mark.django_db
def test_a_failed_experiment_is_told_as_failed_and_a_rerun_is_told_again(owner):
    experiment = make_experiment(created_by=owner, candidates=[])
    _subscribe(owner, "email", ["experiment_finished", "experiment_failed"], team=True, target="team@example.org")
    run = experiment.run_set.get()

    _finish(run, Run.State.FAILED)
    rerun_run = Run.objects.create(
        experiment=experiment, config=run.config, host=run.host, sequence=1, timeline=run.timeline
    )
    _finish(rerun_run)

    assert [d.event for d in Delivery.objects.order_by("id")] == [Event.EXPERIMENT_FAILED, Event.EXPERIMENT_FAILED]
    assert "failed: 1 of 1 runs failed" in Delivery.objects.order_by("id")[0].subject


@pytest.mark.django_db
def test_cancelling_the_last_queued_run_ends_the_experiment(owner):
    experiment = make_experiment(created_by=owner, candidates=[])
    _subscribe(owner, "email", ["experiment_finished"], team=True, target="team@example.org")

    do_cancel_run(experiment.run_set.get(), Actor(owner))

    assert Delivery.objects.get().event == Event.EXPERIMENT_FINISHED


@pytest.mark.django_db
def test_a_host_that_becomes_dirty_is_told_once(owner):
    host = make_host()
    _subscribe(owner, "email", ["host_dirty"], team=True, target="ops@example.org")

    do_mark_host_dirty(host, "pid 7 still holds 1000 MiB")
    do_mark_host_dirty(host, "pid 7 still holds 1000 MiB")

    delivery = Delivery.objects.get()
    assert delivery.event == Event.HOST_DIRTY and "pid 7 still holds 1000 MiB" in delivery.body
    host.refresh_from_db()
    assert host.is_dirty


@pytest.mark.django_db(transaction=True)
def test_a_change_rolled_back_tells_nobody(owner):
    host = make_host()
    _subscribe(owner, "webhook", ["host_dirty"], team=True, target="http://127.0.0.1:9/unused")

    with pytest.raises(RuntimeError), transaction.atomic():
        do_mark_host_dirty(host, "held")
        raise RuntimeError("the teardown's transaction fails")

    assert not Delivery.objects.exists()


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_worker_delivers_a_flag_webhook_after_the_commit_retrying_a_failure(
    owner, receiver, private_queue, start_worker, tmp_path
):
    hook, url = receiver
    hook.failures = 1
    # The receiver listens on loopback, which webhooks may reach only where an admin allowed it.
    start_worker(
        private_queue,
        "notify",
        tmp_path / "worker.log",
        SPECDASH_NOTIFY_RETRY_DELAY="0.2",
        SPECDASH_WEBHOOK_ALLOWED_NETWORKS="127.0.0.1/32",
    )
    _subscribe(owner, "webhook", ["host_dirty"], team=True, target=url)

    with transaction.atomic():
        do_mark_host_dirty(make_host(name="gpu-3"), "pid 11 still holds 2048 MiB")

    deadline = time.monotonic() + 30
    while not hook.bodies and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(hook.bodies) == 1, (tmp_path / "worker.log").read_text()[-3000:]
    assert "pid 11 still holds 2048 MiB" in hook.bodies[0]["text"]
    delivery = Delivery.objects.get()
    for _ in range(50):  # the worker records the success just after the receiver answered
        delivery.refresh_from_db()
        if delivery.state == Delivery.State.SENT:
            break
        time.sleep(0.1)
    assert delivery.state == Delivery.State.SENT and delivery.attempts == 2


@pytest.mark.django_db(transaction=True)
async def test_a_browser_subscriber_sees_the_notification_on_an_open_page(client, member, owner):
    from asgiref.sync import sync_to_async

    await sync_to_async(client.force_login)(member)
    headers = [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()), (b"origin", b"http://127.0.0.1")]
    await sync_to_async(_subscribe)(member, "browser", ["host_dirty"])
    page = WebsocketCommunicator(application, "/ws/notifications/", headers=headers)
    connected, _ = await page.connect(timeout=5)
    assert connected

    host = await sync_to_async(make_host)(name="gpu-5")
    await sync_to_async(transaction.atomic(do_mark_host_dirty))(host, "held")

    shown = await page.receive_json_from(timeout=5)
    assert shown["type"] == "notification" and shown["title"].startswith("[specdash] Host gpu-5 is dirty")
    await page.disconnect()
    delivery = await sync_to_async(Delivery.objects.get)()
    assert delivery.state == Delivery.State.SENT


@pytest.mark.django_db(transaction=True)
async def test_an_outsider_cannot_listen_for_notifications(client, outsider):
    from asgiref.sync import sync_to_async

    await sync_to_async(client.force_login)(outsider)
    headers = [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()), (b"origin", b"http://127.0.0.1")]
    page = WebsocketCommunicator(application, "/ws/notifications/", headers=headers)

    connected, _ = await page.connect(timeout=5)

    assert not connected


@pytest.mark.django_db
def test_a_confirmed_change_tells_its_subscribers_once_not_each_series(owner):
    _subscribe(owner, "email", ["flag_raised"], team=True, target="perf@example.org")
    history = [88.8 * (1 + 0.004 * (-1) ** i) for i in range(10)] + [82.2]
    make_history(history, concurrencies=(1, 4))
    suspicion = Suspicion.objects.get()
    assert not Delivery.objects.exists()  # suspected only: nobody is bothered yet

    confirming = suspicion.confirming_runs.get(config__content_hash=suspicion.config_hash, state=Run.State.QUEUED)
    finish_run(confirming, {1: 82.3, 4: 82.3 * 4})

    flag = Flag.objects.get()
    delivery = Delivery.objects.get()
    assert delivery.event == Event.FLAG_RAISED and delivery.url.endswith(f"/flags/{flag.pk}/")
    assert delivery.subject.startswith("[specdash] Regression flag on ")


@pytest.mark.django_db
def test_a_failed_baseline_that_skips_its_round_tells_once_that_the_experiment_failed(owner):
    experiment = make_experiment(created_by=owner)  # a baseline run and a candidate run
    _subscribe(owner, "email", ["experiment_failed"], team=True, target="team@example.org")
    baseline = experiment.run_set.get(config=experiment.baseline)

    _finish(baseline, Run.State.FAILED)  # the candidate's run is skipped: nothing to compare it with

    assert experiment.run_set.exclude(pk=baseline.pk).get().state == Run.State.CANCELLED
    assert Delivery.objects.get().event == Event.EXPERIMENT_FAILED
