"""Two hosts, two worker slots: runs on different hosts go at the same time (the lock is per host)."""

from __future__ import annotations

import time

import pytest

from experiments.models import Host, Run
from simhost.ports import free_port
from workers.tests.run.simruns import queue_run, sim_config

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_it_runs_two_hosts_in_parallel(sim_host, owner, celery_worker_process):
    second = Host.objects.create(
        **{f.name: getattr(sim_host, f.name) for f in Host._meta.concrete_fields if f.name not in ("id", "name")},
        name=f"{sim_host.name}-2",
    )
    second.server_port = free_port()
    second.active_run = None
    second.save()
    slow = {"SIMHOST_LOAD_SECONDS": "3"}
    runs = [queue_run(host, sim_config(host, env=slow), owner) for host in (sim_host, second)]

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(r.is_finished for r in runs):
        time.sleep(0.5)
        for r in runs:
            r.refresh_from_db()

    assert [r.state for r in runs] == [Run.State.SUCCEEDED] * 2, [r.failure() for r in runs]
    spans = sorted((r.started_at, r.finished_at) for r in runs if r.started_at and r.finished_at)
    assert len(spans) == 2
    assert spans[1][0] < spans[0][1]  # they overlapped: one worker slot per host
