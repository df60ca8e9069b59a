"""One active run per host, also when two workers race for it."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from experiments import actions
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
            claimed.append(actions.do_claim_next_run(host.pk, name))
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
    first = actions.do_claim_next_run(host.pk, "w1")
    assert first is not None and first.sequence == 0
    assert actions.do_claim_next_run(host.pk, "w2") is None

    actions.do_advance_run(first, Run.State.SUCCEEDED)
    actions.do_release_host(first)

    second = actions.do_claim_next_run(host.pk, "w2")
    assert second is not None and second.sequence == 1
    assert Host.objects.get(pk=host.pk).active_run_id == second.pk
