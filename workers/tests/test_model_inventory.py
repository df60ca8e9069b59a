"""A worker keeps the models it lists on a host: the submission checks model paths and pairs against them."""

from __future__ import annotations

import pytest

from experiments.tests.factories import MODELS, make_host
from experiments.tests.test_submit_checks import DRAFT, TARGET
from workers import tasks


@pytest.mark.django_db(transaction=True)  # the task closes the connection it finds (close_old_connections)
def test_it_stores_the_models_a_worker_lists(monkeypatch):
    host = make_host(models_root=MODELS)
    monkeypatch.setattr(tasks.hosts, "list_host", lambda h: tasks.hosts.HostListing([TARGET, DRAFT], None, "no help"))

    answer = tasks.list_host_models(host.pk)

    assert answer == {"ok": True, "models": [TARGET, DRAFT], "server_flags": None}
    host.refresh_from_db()
    assert host.model_inventory == {"models_root": MODELS, "models": [TARGET, DRAFT]}
    assert host.model_inventory_at is not None
