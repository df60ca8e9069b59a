"""A worker reads the flags the host's SGLang accepts over real sshd, with the environment its servers get, and the
submission then refuses a flag that version lacks."""

from __future__ import annotations

import copy

import pytest

from experiments.models import ApiToken
from experiments.tests.factories import experiment_payload
from workers import tasks

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_it_reads_the_hosts_sglang_flags_and_version_and_the_submission_holds_to_them(
    client, owner, sim_host, tmp_path
):
    canary = tmp_path / "canary"
    # The host's default environment reaches the --help read quoted, as it reaches a server: never a command.
    sim_host.default_env = {"SIMHOST_SGLANG_VERSION": "0.5.23", "SIMHOST_NOTE": f"$(touch {canary}); touch {canary}"}
    sim_host.save(update_fields=["default_env"])

    answer = tasks.list_host_models(sim_host.pk)

    assert answer["ok"] and not canary.exists()
    sim_host.refresh_from_db()
    assert sim_host.listed_sglang_version == "0.5.23" and sim_host.server_flags_at is not None
    known = sim_host.known_server_flags()
    assert known is not None and "--speculative-adaptive" in known and "--cuda-graph-max-bs" not in known

    _, token = ApiToken.issue(owner)
    payload = copy.deepcopy(experiment_payload(sim_host))
    payload["candidates"][0]["extra_args"] = ["--cuda-graph-max-bs", "8"]
    refused = client.post(
        "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )
    assert refused.status_code == 409  # a flag this host's SGLang lacks
    assert "SGLang 0.5.23 on" in refused.json()["errors"]["candidates.0.extra_args"][0]
    host = client.get(f"/api/hosts/{sim_host.pk}", headers={"Authorization": f"Bearer {token}"}).json()
    assert host["sglang_version"] == "0.5.23" and "--cuda-graph-max-bs-decode" in host["server_flags"]


def test_a_launcher_that_is_not_sglang_leaves_the_flags_unknown(sim_host):
    sim_host.launcher = "python -m json.tool"
    sim_host.save(update_fields=["launcher"])

    answer = tasks.list_host_models(sim_host.pk)

    assert answer["ok"] and answer["server_flags"] is None
    sim_host.refresh_from_db()
    assert sim_host.known_server_flags() is None and sim_host.server_flags == {}
