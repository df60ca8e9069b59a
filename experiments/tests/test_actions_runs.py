"""One active run per host, also when two workers race for it."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from experiments.actions.hosts import do_release_host
from experiments.actions.runs import do_abandon_run, do_advance_run, do_claim_next_run
from experiments.models import Host, Run
from experiments.tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_gives_the_host_to_exactly_one_of_two_racing_workers(owner):
    if connection.vendor != "postgresql":
        pytest.skip("needs a database with concurrent writers")
    host = factories.make_host()
    factories.make_experiment(host=host, created_by=owner)  # baseline + one candidate: two queued runs
    barrier = threading.Barrier(2)
    claimed: list[Run | None] = []

    def worker(name: str) -> None:
        try:
            barrier.wait()
            claimed.append(do_claim_next_run(host.pk, name))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    winners = [run for run in claimed if run is not None]
    assert len(winners) == 1
    host.refresh_from_db()
    assert host.active_run_id == winners[0].pk
    assert Run.objects.filter(host=host).exclude(state=Run.State.QUEUED).count() == 1


def test_it_starts_the_next_run_only_after_the_host_is_released(owner):
    host = factories.make_host()
    factories.make_experiment(host=host, created_by=owner)
    first = do_claim_next_run(host.pk, "w1")
    assert first is not None and first.sequence == 0
    assert do_claim_next_run(host.pk, "w2") is None

    do_advance_run(first, Run.State.SUCCEEDED)
    do_release_host(first)

    second = do_claim_next_run(host.pk, "w2")
    assert second is not None and second.sequence == 1
    assert Host.objects.get(pk=host.pk).active_run_id == second.pk


def _wait_until_a_session_waits_for_a_lock(timeout: float = 10.0) -> None:
    with connection.cursor() as cursor:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.02)
    pytest.fail(f"no session waited for a row lock within {timeout} s (the abandon finished or never started)")


def test_a_crashed_runs_release_takes_the_host_before_it_skips_the_rest_of_its_round(owner):
    """The deadlock it prevents: the release of a failed baseline cancelled the round's queued candidate and then
    waited for the host, while a claim held the host and waited for that candidate."""
    if connection.vendor != "postgresql":
        pytest.skip("needs a database with concurrent writers")
    host = factories.make_host()
    experiment = factories.make_experiment(host=host, created_by=owner)
    baseline_run = do_claim_next_run(host.pk, "w1")
    assert baseline_run is not None and baseline_run.config_id == experiment.baseline_id
    candidate_run = Run.objects.queued().get(experiment=experiment)
    host_held, let_go = threading.Event(), threading.Event()

    def hold_the_host() -> None:  # stands for a claim in progress
        try:
            with transaction.atomic():
                Host.objects.select_for_update(no_key=True).get(pk=host.pk)
                host_held.set()
                let_go.wait(timeout=30)
        finally:
            connection.close()

    def abandon() -> None:
        try:
            do_abandon_run(baseline_run, "The orchestrator crashed: boom")
        finally:
            connection.close()

    holder, abandoner = threading.Thread(target=hold_the_host), threading.Thread(target=abandon)
    holder.start()
    assert host_held.wait(timeout=10)
    abandoner.start()
    try:
        _wait_until_a_session_waits_for_a_lock()
        with transaction.atomic():  # what the claim would do next: the candidate is not held by the abandon
            Run.objects.select_for_update(nowait=True).get(pk=candidate_run.pk)
    finally:
        let_go.set()
        holder.join(timeout=30)
        abandoner.join(timeout=30)

    baseline_run.refresh_from_db()
    candidate_run.refresh_from_db()
    assert baseline_run.state == Run.State.FAILED
    assert candidate_run.state == Run.State.CANCELLED
    assert Host.objects.get(pk=host.pk).active_run_id is None


def test_a_claim_passes_over_a_queued_run_another_transaction_is_cancelling(owner):
    if connection.vendor != "postgresql":
        pytest.skip("needs a database with concurrent writers")
    host = factories.make_host()
    experiment = factories.make_experiment(host=host, created_by=owner)
    first, second = Run.objects.filter(experiment=experiment).order_by("sequence")
    claimed: list[Run | None] = []

    def claim() -> None:
        try:
            claimed.append(do_claim_next_run(host.pk, "w1"))
        finally:
            connection.close()

    with transaction.atomic():
        Run.objects.select_for_update(no_key=True).get(pk=first.pk)
        claimer = threading.Thread(target=claim)
        claimer.start()
        claimer.join(timeout=10)
        assert not claimer.is_alive(), "the claim waited for the run being cancelled"
    assert [run.pk for run in claimed if run] == [second.pk]
