"""A host's default environment and shell setup: set by admins only, held to the launch policy, merged under each
config's environment, one quoted word each in the launch, shown masked to everyone else."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from experiments.models import AuditEvent, Host
from experiments.rules import secrets
from experiments.tests.factories import make_config, make_host
from workers.run import server

pytestmark = pytest.mark.django_db

FORM = {"address": "127.0.0.1", "port": "22", "username": "infer", "work_dir": "w", "models_root": "",
        "launcher": "python3 -m sglang.launch_server", "python": "python3", "server_port": "30000"}  # fmt: skip


def test_it_saves_an_admins_default_environment_and_audits_it(owner_client):
    host = make_host()

    response = owner_client.post(
        f"/hosts/{host.pk}/edit/",
        {**FORM, "name": host.name, "default_env": "NCCL_IB_HCA=mlx5_0\nHF_TOKEN=hf_abc\n# a comment"},
    )

    assert response.status_code == 302
    host.refresh_from_db()
    assert secrets.revealed(host.default_env) == {"NCCL_IB_HCA": "mlx5_0", "HF_TOKEN": "hf_abc"}
    event = AuditEvent.objects.filter(action=AuditEvent.Action.HOST_EDIT).latest("pk")
    assert event.detail["changes"]["default_env"] == [{}, {"NCCL_IB_HCA": "mlx5_0", "HF_TOKEN": "(hidden)"}]
    page = owner_client.get(f"/hosts/{host.pk}/").content.decode()
    assert "NCCL_IB_HCA=mlx5_0" in page and "hf_abc" not in page and "HF_TOKEN=(hidden)" in page


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ("LD_PRELOAD=/tmp/x.so", "LD_PRELOAD: not an allowed environment variable"),
        ("NCCL_NET_PLUGIN=/tmp/p.so", "NCCL_NET_PLUGIN: not an allowed environment variable"),
        ("NCCL_PROTO=LL\x1b[2J", "must not contain control characters"),
        ("not a line", "expected NAME=VALUE"),
    ],
)
def test_it_refuses_a_default_environment_the_launch_policy_refuses(owner_client, env, error):
    host = make_host()

    response = owner_client.post(f"/hosts/{host.pk}/edit/", {**FORM, "name": host.name, "default_env": env})

    assert response.status_code == 400
    assert error in response.content.decode()
    host.refresh_from_db()
    assert host.default_env == {}


def test_it_refuses_control_characters_in_the_shell_setup(owner_client):
    host = make_host()

    response = owner_client.post(
        f"/hosts/{host.pk}/edit/", {**FORM, "name": host.name, "shell_setup": "source a\x1b[2K\x08\x08b"}
    )

    assert response.status_code == 400
    assert "control characters other than tabs and newlines" in response.content.decode()


def test_it_lets_no_one_but_an_admin_set_the_default_environment(client, maintainer):
    host = make_host()
    client.force_login(maintainer)

    response = client.post(f"/hosts/{host.pk}/edit/", {**FORM, "name": host.name, "default_env": "NCCL_PROTO=LL"})

    assert response.status_code == 403
    assert Host.objects.get(pk=host.pk).default_env == {}


def test_it_launches_with_the_hosts_defaults_under_the_configs_env_each_one_quoted_word(tmp_path):
    hostile = "LL; touch /tmp/pwned $(id) `id`"
    host = make_host(default_env={"HF_TOKEN": hostile, "NCCL_ALGO": "Ring"})
    config = make_config(env={"NCCL_ALGO": "Tree"})

    words = shlex.split(server.launch_command(host, config))

    assert "NCCL_ALGO=Tree" in words and "NCCL_ALGO=Ring" not in words
    # The secret goes on standard input, where the launch's shell exports it as one word, never run.
    assert not any("HF_TOKEN" in word for word in words)
    assert server.launch_secrets(host, config) == {"HF_TOKEN": hostile}
    shell = subprocess.run(
        ["bash", "-c", f'{server.EXPORT_FROM_STDIN}; printf %s "$HF_TOKEN"'],
        input=f"HF_TOKEN={hostile}\n\n", capture_output=True, text=True, cwd=tmp_path, check=True,
    )  # fmt: skip
    assert shell.stdout == hostile and not (tmp_path / "pwned").exists() and not Path("/tmp/pwned").exists()
    # A row written around the form (or before a rule) is refused before anything reaches the host.
    host.default_env = {"LD_PRELOAD": "/tmp/x.so"}
    assert any("LD_PRELOAD" in refusal for refusal in server.launch_refusals(host, config))
    with pytest.raises(ValueError, match="LD_PRELOAD"):
        server.launch_command(host, config)


def test_it_takes_a_default_environment_through_the_api_under_the_same_rules(owner_client, settings):
    settings.SPECDASH_HOST_ALLOWLIST = ("10.0.0.0/8",)
    body = {**FORM, "address": "10.0.0.9", "name": "gpu-9", "default_env": {"LD_PRELOAD": "/tmp/x.so"}}

    refused = owner_client.post("/api/hosts", body, content_type="application/json")
    created = owner_client.post(
        "/api/hosts", {**body, "default_env": {"NCCL_PROTO": "LL", "HF_TOKEN": "t"}}, content_type="application/json"
    )

    assert refused.status_code == 403 and "LD_PRELOAD" in str(refused.json()["errors"]["default_env"])
    assert created.status_code == 201 and created.json()["default_env"] == {"NCCL_PROTO": "LL", "HF_TOKEN": "(hidden)"}
    assert secrets.revealed(Host.objects.get(name="gpu-9").default_env) == {"NCCL_PROTO": "LL", "HF_TOKEN": "t"}


def test_an_admin_saving_the_host_form_unchanged_keeps_its_secret(owner_client):
    host = make_host(default_env={"HF_TOKEN": "hf_abc", "NCCL_IB_HCA": "mlx5_0"})
    form = owner_client.get(f"/hosts/{host.pk}/edit/").content.decode()
    assert "HF_TOKEN=(hidden)" in form and "hf_abc" not in form  # admins do not read it back either

    kept = owner_client.post(
        f"/hosts/{host.pk}/edit/", {**FORM, "name": host.name, "default_env": "HF_TOKEN=(hidden)\nNCCL_IB_HCA=mlx5_1"}
    )
    typed = owner_client.post(
        f"/hosts/{make_host().pk}/edit/", {**FORM, "name": "other", "default_env": "HF_TOKEN=(hidden)"}
    )

    assert kept.status_code == 302
    host.refresh_from_db()
    assert host.effective_env({}) == {"HF_TOKEN": "(hidden)", "NCCL_IB_HCA": "mlx5_1"}
    assert server.launch_secrets(host, make_config()) == {"HF_TOKEN": "hf_abc"}
    assert typed.status_code == 400 and "HF_TOKEN shows (hidden): type its value" in typed.content.decode()
