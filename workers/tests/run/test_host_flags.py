"""Flags an admin allows for one host (issue 24), tested as the requests that would abuse them: a member's config
with a flag of `launch_flags.HOST_FLAG_RULES` is refused on a host that does not allow it and launched, exactly as
given, on one that does; the worker refuses it again once the allowance is withdrawn; an admin cannot allow a flag
that loads code, reads files or connects out; a member cannot change a host's allowances; every change is audited."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from experiments.models import ApiToken, AuditEvent, Host, ServerConfig
from experiments.rules.launch_fields import SGLANG, managed_flags
from experiments.rules.launch_flags import FLAG_RULES, HOST_FLAG_RULES, NEVER_FLAGS
from experiments.rules.launch_policy import extra_args_refusals, host_flag_refusal
from experiments.tests.factories import experiment_payload, make_host, row_counts, set_candidate
from workers.run import server
from workers.tests.run.test_launch_safety import PROBE, Remote

ARGS = "candidates.0.extra_args"
WORKERS = ["--tokenizer-worker-num", "4"]


def _post(client, token: str, payload: dict[str, Any]):
    return client.post(
        "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )


def _submit(client, member, host: Host, extra_args: list[str]):
    _, token = ApiToken.issue(member)
    payload = copy.deepcopy(experiment_payload(host))
    set_candidate(extra_args=extra_args)(payload)
    return _post(client, token, payload)


def _host_form(host: Host, **fields: str) -> dict[str, str]:
    return {"name": host.name, "address": host.address, "port": "22", "username": host.username,
            "work_dir": host.work_dir,
            "models_root": host.models_root, "launcher": host.launcher, "python": "python3", "server_port": "30000",
            **fields}  # fmt: skip


@pytest.mark.django_db
def test_it_refuses_a_members_admin_allowable_flag_on_a_host_that_does_not_allow_it(client, member):
    host = make_host(name="gpu8", extra_flags=["--enable-mscclpp"])  # allows another flag, not this one
    before = row_counts()

    response = _submit(client, member, host, WORKERS)

    assert response.status_code == 403, response.content  # the launch policy refuses it
    assert response.json()["errors"][ARGS] == [
        "--tokenizer-worker-num is not allowed on this host: it is not on the list of flags a member may set "
        "(an admin can allow it for the host, with the host's extra flags)."
    ]
    assert row_counts() == before


@pytest.mark.django_db
def test_it_takes_the_flag_on_a_host_that_allows_it_and_still_bounds_its_value(client, member):
    host = make_host(name="gpu8", extra_flags=["--tokenizer-worker-num"])

    accepted = _submit(client, member, host, WORKERS)
    too_many = _submit(client, member, host, ["--tokenizer-worker-num", "1000"])

    assert accepted.status_code == 201, accepted.content
    assert ServerConfig.objects.filter(extra_args=WORKERS).count() == 1
    assert too_many.status_code == 403  # the policy's value rule
    assert too_many.json()["errors"][ARGS] == ["--tokenizer-worker-num takes a whole number from 1 to 16, not '1000'."]


@pytest.mark.django_db
def test_it_says_a_flag_that_loads_code_is_never_settable_even_on_a_host_with_extra_flags(client, member):
    host = make_host(name="gpu8", extra_flags=sorted(HOST_FLAG_RULES))

    response = _submit(client, member, host, ["--trust-remote-code"])

    assert response.json()["errors"][ARGS] == [
        "--trust-remote-code is never settable in a config: it loads code into the server (no host may allow it)."
    ]


@pytest.mark.django_db
def test_the_worker_refuses_the_flag_once_the_host_no_longer_allows_it(client, member):
    host = make_host(name="gpu8", extra_flags=["--tokenizer-worker-num"])
    assert _submit(client, member, host, WORKERS).status_code == 201
    config = ServerConfig.objects.get(extra_args=WORKERS)

    Host.objects.filter(pk=host.pk).update(extra_flags=[])
    host.refresh_from_db()

    with pytest.raises(ValueError, match="--tokenizer-worker-num is not allowed on this host"):
        server.launch_command(host, config)
    # A stored allowance the list no longer holds (or never held) opens nothing either.
    host.extra_flags = ["--trust-remote-code", "--tokenizer-worker-num "]
    with pytest.raises(ValueError, match="--tokenizer-worker-num is not allowed on this host"):
        server.launch_command(host, config)


@pytest.mark.integration
@pytest.mark.django_db
def test_it_launches_the_allowed_flag_on_the_host_as_exactly_its_argv(client, member, sshd):

    host = make_host(name="gpu8", extra_flags=["--tokenizer-worker-num"], launcher=PROBE, server_port=31002)
    assert _submit(client, member, host, WORKERS).status_code == 201
    config = ServerConfig.objects.get(extra_args=WORKERS)
    remote = Remote(sshd)
    try:
        seen = remote.launch(host, config)
    finally:
        remote(remote.conn.close())
        remote.loop.close()

    assert seen["argv"] == [
        "--model-path", config.model_path, "--tp-size", str(config.tp_size), "--host", "127.0.0.1",
        "--port", "31002", *_speculative_argv(config), *WORKERS, "--enable-metrics",
    ]  # fmt: skip


def _speculative_argv(config: ServerConfig) -> list[str]:
    argv = ["--speculative-algorithm", config.speculative_algorithm]
    argv += ["--speculative-draft-model-path", config.speculative_draft_model_path]
    for field in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
        if getattr(config, field) is not None:
            argv += [f"--{field.replace('_', '-')}", str(getattr(config, field))]
    return argv


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("flag", "why"),
    [
        ("--trust-remote-code", "--trust-remote-code loads code into the server: no host may allow it."),
        ("--model-impl", "--model-impl loads code into the server: no host may allow it."),
        ("--chat-template", "--chat-template reads or writes files wherever it says: no host may allow it."),
        ("--dist-init-addr", "--dist-init-addr listens or connects out: no host may allow it."),
        ("--otlp-traces-endpoint", "--otlp-traces-endpoint listens or connects out: no host may allow it."),
        ("--api-key", "--api-key changes who may call the server: no host may allow it."),
        ("--mem-fraction-static", "--mem-fraction-static is a member's to set already: a host need not allow it."),
        ("--some-future-plugin", "'--some-future-plugin' is not on the list of flags an admin may allow for a host"),
        ("--Tokenizer-Worker-Num", "'--Tokenizer-Worker-Num' is not on the list of flags an admin may allow"),
    ],
)
def test_an_admin_cannot_allow_a_flag_that_is_not_on_the_hosts_list(client, owner, flag, why):
    host = make_host(extra_flags=["--enable-mscclpp"])
    client.force_login(owner)

    response = client.post(
        f"/hosts/{host.pk}/edit/", _host_form(host, extra_flags=f"--tokenizer-worker-num, {flag}"), follow=True
    )

    assert response.status_code == 400
    assert why.replace("'", "&#x27;") in response.content.decode()
    host.refresh_from_db()
    assert host.extra_flags == ["--enable-mscclpp"]
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.HOST_EDIT).exists()


@pytest.mark.django_db
def test_an_admin_allows_flags_for_a_host_and_the_audit_records_before_and_after(client, owner):
    host = make_host()
    client.force_login(owner)

    form = client.get(f"/hosts/{host.pk}/edit/").content.decode()
    response = client.post(
        f"/hosts/{host.pk}/edit/", _host_form(host, extra_flags="--tokenizer-worker-num --enable-nccl-nvls")
    )
    again = client.post(f"/hosts/{host.pk}/edit/", _host_form(host, extra_flags="--enable-nccl-nvls"))

    assert 'name="extra_flags"' in form
    assert response.status_code == again.status_code == 302
    host.refresh_from_db()
    assert host.extra_flags == ["--enable-nccl-nvls"]
    edits = AuditEvent.objects.filter(action=AuditEvent.Action.HOST_EDIT, target_id=host.pk).order_by("at", "id")
    assert [e.detail["changes"] for e in edits] == [
        {"extra_flags": [[], ["--tokenizer-worker-num", "--enable-nccl-nvls"]]},
        {"extra_flags": [["--tokenizer-worker-num", "--enable-nccl-nvls"], ["--enable-nccl-nvls"]]},
    ]
    assert "--enable-nccl-nvls" in client.get(f"/hosts/{host.pk}/").content.decode()


@pytest.mark.django_db
def test_a_member_cannot_change_a_hosts_extra_flags(client, member, settings):
    settings.SPECDASH_HOST_ALLOWLIST = ("10.0.0.0/8",)
    host = make_host()
    client.force_login(member)
    _, token = ApiToken.issue(member)
    body = {"name": "gpu-9", "address": "10.0.0.9", "port": 22, "username": "infer", "work_dir": "specdash-work",
            "launcher": "python3 -m sglang.launch_server", "python": "python3", "server_port": 30000,
            "extra_flags": ["--tokenizer-worker-num"]}  # fmt: skip

    page = client.post(f"/hosts/{host.pk}/edit/", _host_form(host, extra_flags="--tokenizer-worker-num"))
    api = client.post("/api/hosts", body, content_type="application/json", headers={"Authorization": f"Bearer {token}"})

    assert page.status_code == 403 and api.status_code == 403
    host.refresh_from_db()
    assert host.extra_flags == []
    assert not Host.objects.filter(name="gpu-9").exists()
    assert not AuditEvent.objects.filter(action__in=[AuditEvent.Action.HOST_EDIT, AuditEvent.Action.HOST_CREATE])


@pytest.mark.django_db
def test_an_admin_registers_a_host_with_extra_flags_through_the_api(client, owner, settings):
    settings.SPECDASH_HOST_ALLOWLIST = ("10.0.0.0/8",)
    _, token = ApiToken.issue(owner)
    body = {"name": "gpu-9", "address": "10.0.0.9", "port": 22, "username": "infer", "work_dir": "specdash-work",
            "launcher": "python3 -m sglang.launch_server", "python": "python3", "server_port": 30000,
            "extra_flags": ["--tokenizer-worker-num"]}  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}

    created = client.post("/api/hosts", body, content_type="application/json", headers=headers)
    refused = client.post(
        "/api/hosts", {**body, "name": "gpu-10", "extra_flags": ["--trust-remote-code"]},
        content_type="application/json", headers=headers,
    )  # fmt: skip

    assert created.status_code == 201, created.content
    assert created.json()["extra_flags"] == ["--tokenizer-worker-num"]
    assert AuditEvent.objects.get(action=AuditEvent.Action.HOST_CREATE).detail["extra_flags"] == body["extra_flags"]
    assert refused.status_code == 422
    assert refused.json()["errors"]["extra_flags"] == [
        "--trust-remote-code loads code into the server: no host may allow it."
    ]


def test_the_hosts_list_is_apart_from_a_members_and_from_what_is_never_allowed():
    assert not HOST_FLAG_RULES.keys() & FLAG_RULES.keys()
    assert not HOST_FLAG_RULES.keys() & NEVER_FLAGS.keys() and not FLAG_RULES.keys() & NEVER_FLAGS.keys()
    for flag, rule in HOST_FLAG_RULES.items():
        assert host_flag_refusal(flag) is None
        needs = [f"{flag} needs a value: {rule.text}"] if rule.takes_value else []
        assert extra_args_refusals([flag], extra_flags=[flag]) == needs
    assert all(host_flag_refusal(flag) for flag in NEVER_FLAGS)
    # An allowed flag that is a prefix of a field's flag would let argparse read it as that field.
    assert not [flag for flag in HOST_FLAG_RULES if any(m.startswith(flag) for m in managed_flags(SGLANG))]
