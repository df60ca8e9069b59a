"""One active run per host, also when two workers race for it."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from experiments.actions.hosts import do_release_host
from experiments.actions.runs import do_advance_run, do_claim_next_run
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
