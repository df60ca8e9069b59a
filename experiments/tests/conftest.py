"""Fixtures of the domain's tests: an experiment of a baseline and one EAGLE-3 candidate, and its first run; the
`specdash` command run in process (`cli`, in a config directory of its own, `cli_home`); the tasks sent (`sent`);
the JSON API called as a given user (`api`)."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.actions import dispatch

from ..models import ApiToken
from .cli_support import cli, cli_home  # noqa: F401  (fixtures)
from .factories import make_eagle_config, make_experiment


@pytest.fixture
def experiment():
    return make_experiment(name="eagle3 vs baseline", candidates=[make_eagle_config(name="eagle3-2step")])


@pytest.fixture
def run(experiment):
    return experiment.run_set.order_by("sequence").first()


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, list]]:
    """Every task sent (the dispatcher's only way out), none reaching a broker; asking a worker fails the test."""
    calls: list[tuple[str, list]] = []

    def send_task(name, args=None, **kwargs):
        calls.append((name, args))
        if name == dispatch.TEST_HOST_TASK:
            raise AssertionError("a reader asked a worker and would wait for it")

    monkeypatch.setattr(dispatch.current_app, "send_task", send_task)
    return calls


@pytest.fixture
def api(client):
    """`api(user, "get" or "post", url, payload)`: the JSON API called with a new token of `user`."""

    def call(user, method: str, url: str, payload: dict[str, Any] | None = None):
        _, token = ApiToken.issue(user)
        headers = {"Authorization": f"Bearer {token}"}
        if method == "get":
            return client.get(url, headers=headers)
        return client.post(url, payload or {}, content_type="application/json", headers=headers)

    return call
