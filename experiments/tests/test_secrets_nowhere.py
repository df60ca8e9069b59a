"""A secret set on a config (or on a host) is read back by nobody: not by another member, a viewer or the config's own
owner, on any page, API answer, export, preview, schedule note or study recommendation; and nowhere in the database
but the two fields that hold it for the launch.

The walk is the URL patterns themselves (pages, the API and downloads), so a new endpoint is walked without anyone
adding it here; the database scan reads every table's rows as text, so a new table or note that copies a secret
fails the test however it was written."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from experiments.actions.audit import Actor
from experiments.actions.notifications import do_subscribe, notify_if_experiment_ended
from experiments.actions.schedules import do_build_experiment_schedule
from experiments.actions.users import do_set_role
from experiments.live.broadcast import run_state_event
from experiments.models import AdaptiveSchedule, Delivery, Run, ServerConfig, Study, Subscription
from experiments.rules import secrets

from .factories import make_config, make_eagle_config, make_experiment, make_host, make_measurement

pytestmark = pytest.mark.django_db

TOKEN = "hf_W4lkS3cretT0kenNobodyReads"
HOST_TOKEN = "hostS3cretPassw0rdOfTheAdmin"
PROFILE = {"concurrency": [1], "num_prompts": 8, "input_len": 128, "output_len": 128, "passes": 1}
NOT_WALKED = re.compile(r"^(admin/|login/$|logout/$|api/docs)")


def _patterns(resolver: URLResolver, prefix: str = "") -> Iterator[str]:
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _patterns(entry, route)
        elif isinstance(entry, URLPattern):
            yield route


def _user(django_user_model, name: str, role: str):
    user = django_user_model.objects.create_user(name, password=f"{name}-Pass-9x")
    do_set_role(user, role, Actor.command())
    return django_user_model.objects.get(pk=user.pk)


@pytest.fixture
def world(django_user_model, api) -> dict[str, Any]:
    """A member's configs holding a secret, measured, with everything built from them that shows a config's
    settings: a schedule (its notes name the winners' settings), a sweep preview and a study on them (by another
    member), the finished experiment's notification; and a host whose default environment holds an admin's secret."""
    owner = _user(django_user_model, "alice", "member")
    other = _user(django_user_model, "bob", "member")
    viewer = _user(django_user_model, "carol", "viewer")
    host = make_host(default_env={"NCCL_IB_HCA": "mlx5_0", "SIMHOST_PASSWORD": HOST_TOKEN})
    host.extra_env_prefixes = ["SIMHOST_"]
    host.save()
    env = {"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"}
    fast = make_eagle_config(2, name="s2", env=env, created_by=owner)
    slow = make_eagle_config(1, name="s1", env={**env, "NCCL_PROTO": "Simple"}, created_by=owner)
    baseline = make_config(name="baseline", env={"HF_TOKEN": TOKEN}, created_by=owner)
    experiment = make_experiment(host=host, baseline=baseline, candidates=[fast, slow], with_runs=False)
    experiment.created_by = owner
    experiment.save()
    experiment.profile.concurrency = [1, 8]
    experiment.profile.save()
    truth = {"baseline": {1: 80.0, 8: 460.0}, "s2": {1: 92.0, 8: 400.0}, "s1": {1: 85.0, 8: 470.0}}
    for launch in range(2):
        for config in (baseline, fast, slow):
            run = Run.objects.create(experiment=experiment, config=config, host=host, launch_index=launch,
                                     sequence=Run.objects.filter(experiment=experiment).count(),
                                     state=Run.State.SUCCEEDED, launch_command="env x")  # fmt: skip
            for level, tok_s in truth[config.name].items():
                make_measurement(run, concurrency=level, output_throughput=tok_s * (1 + 0.003 * (-1) ** launch))
    created = api(
        owner,
        "post",
        "/api/configs",
        {"name": "typed", "model_path": fast.model_path, "tp_size": 8, "env": {"HF_TOKEN": TOKEN}},
    )  # audited as it is made
    assert created.status_code == 201, created.content
    schedule = do_build_experiment_schedule(experiment, actor=Actor(other))
    for user in (owner, other, viewer):
        do_subscribe(Subscription(user=user, channel="browser", events=["experiment_finished"]), Actor(user))
    notify_if_experiment_ended(experiment.pk)
    assert Delivery.objects.count() == 3

    sweep = {"base": fast.pk, "speculative_num_steps": [1, 3], "speculative_eagle_topk": [1]}
    preview = api(other, "post", "/api/sweeps/preview", {"host": host.name, "sweep": sweep, "profile": PROFILE})
    assert preview.status_code == 200, preview.content
    study = api(other, "post", "/api/studies", {
        "name": "tune", "host": host.name, "baseline": baseline.pk, "sweep": sweep,
        "profile": PROFILE, "budget": {"launches": 4},
        "precision": {"within": 0.05}, "round_size": 2, "seed": 1,
    })  # fmt: skip
    assert study.status_code == 201, study.content
    run, *_, other_run = Run.objects.filter(experiment=experiment)
    return {
        "users": {"owner": owner, "other member": other, "viewer": viewer},
        "answers": {
            "sweep preview": preview.content.decode(),
            **{f"run {r.pk} websocket state": json.dumps(run_state_event(r)) for r in Run.objects.all()},
        },
        "values": {
            "experiment_id": str(experiment.pk), "run_id": str(run.pk), "other_run_id": str(other_run.pk),
            "other_id": str(other_run.pk), "config_id": str(fast.pk), "host_id": str(host.pk),
            "study_id": str(study.json()["id"]), "schedule_id": str(schedule.pk), "band": "0",
            "other_experiment_id": str(experiment.pk),
        },
    }  # fmt: skip


def _walk(client: Client, values: dict[str, str]) -> dict[str, str]:
    """Every GET route whose parameters the world fills: its answer's text."""
    answers = {}
    for route in _patterns(get_resolver()):
        if NOT_WALKED.match(route):
            continue
        names = re.findall(r"<(?:\w+:)?(\w+)>", route)
        if any(name not in values for name in names):
            continue
        path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values[m.group(1)], route)
        response = client.get(path, {"with": values["other_run_id"], "q": "s"})
        body = b"".join(response.streaming_content) if response.streaming else response.content  # type: ignore[attr-defined]
        answers[path] = body.decode(errors="replace")
    return answers


def test_nobody_reads_a_secret_back_anywhere(world):
    values = world["values"]
    for who, user in world["users"].items():
        client = Client()
        client.force_login(user)
        answers = {**_walk(client, values), **world["answers"]}
        # The walk reaches what shows a config's settings (a broken walk would find nothing and pass).
        for must in (f"/api/configs/{values['config_id']}", f"/schedules/{values['schedule_id']}/",
                     f"/api/schedules/{values['schedule_id']}", f"/api/studies/{values['study_id']}",
                     f"/experiments/{values['experiment_id']}/export.json", f"/configs/{values['config_id']}/",
                     f"/api/hosts/{values['host_id']}"):  # fmt: skip
            assert must in answers, (who, must)
        assert "NCCL_PROTO" in answers[f"/api/configs/{values['config_id']}"]
        assert "HF_TOKEN" in answers[f"/api/configs/{values['config_id']}"]
        leaks = [where for where, text in answers.items() if TOKEN in text or HOST_TOKEN in text]
        assert leaks == [], f"{who} reads the secret at {leaks}"


def test_the_database_holds_a_secret_only_where_the_launch_reads_it(world):
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
        holding = set()
        for table in tables:
            quoted = connection.ops.quote_name(table)
            cursor.execute(f"SELECT 1 FROM {quoted} t WHERE t::text LIKE %s OR t::text LIKE %s LIMIT 1",
                           [f"%{TOKEN}%", f"%{HOST_TOKEN}%"])  # fmt: skip
            if cursor.fetchone():
                holding.add(table)

    assert holding == {"experiments_serverconfig", "experiments_host"}
    # Schedules' notes, study recommendations and the notification name the settings, masked.
    schedule = AdaptiveSchedule.objects.get(pk=world["values"]["schedule_id"])
    assert any(f"HF_TOKEN={secrets.MASK}" in note for note in schedule.notes), schedule.notes
    # What another member built on the config (a study's candidates) still launches with its value.
    study = Study.objects.get(pk=world["values"]["study_id"])
    launched = [secrets.revealed(c.config.env).get("HF_TOKEN") for c in study.studyconfig_set.select_related("config")]
    assert launched and set(launched) == {TOKEN}


def test_a_stored_secret_is_a_secret_value_in_every_read_and_its_value_only_on_reveal():
    config = make_eagle_config(env={"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"})

    loaded = ServerConfig.objects.get(pk=config.pk)
    (from_values,) = ServerConfig.objects.filter(pk=config.pk).values_list("env", flat=True)

    for env in (config.env, loaded.env, from_values, {**loaded.env}, dict(loaded.env)):
        assert env["HF_TOKEN"] == secrets.MASK and env["NCCL_PROTO"] == "LL"
        assert f"{env['HF_TOKEN']}" == secrets.MASK and TOKEN not in repr(env) and TOKEN not in str(env)
        assert secrets.revealed(env)["HF_TOKEN"] == TOKEN
    loaded.env["HF_TOKEN"] = "hf_new"  # however it is put in, it is held as a secret
    assert loaded.env["HF_TOKEN"] == secrets.MASK and secrets.reveal(loaded.env["HF_TOKEN"]) == "hf_new"


def test_a_copy_keeps_the_secret_and_a_copy_of_its_mask_is_refused_loudly():
    config = make_eagle_config(env={"HF_TOKEN": TOKEN})

    copy = make_eagle_config(env=dict(config.env))  # what a headroom copy or a sweep candidate does
    assert secrets.revealed(ServerConfig.objects.get(pk=copy.pk).env) == {"HF_TOKEN": TOKEN}
    assert copy.content_hash == config.content_hash  # the same launch, by its value

    with pytest.raises(ValueError, match="would be stored as '\\(hidden\\)'"):
        make_eagle_config(env={"HF_TOKEN": str(config.env["HF_TOKEN"])})  # str() of a secret is its mask


def test_two_tokens_are_two_launches():
    one, two = make_eagle_config(env={"HF_TOKEN": "hf_one"}), make_eagle_config(env={"HF_TOKEN": "hf_two"})

    assert one.content_hash != two.content_hash


def test_a_secret_is_not_a_sweep_dimension(api, member):
    host = make_host()
    base = make_eagle_config(env={"NCCL_PROTO": "LL"})
    sweep = {
        "base": base.pk,
        "speculative_num_steps": [1],
        "speculative_eagle_topk": [1],
        "env": {"HF_TOKEN": ["hf_a", "hf_b"]},
    }

    response = api(member, "post", "/api/sweeps/preview", {"host": host.name, "sweep": sweep, "profile": PROFILE})

    assert response.status_code == 422
    assert "HF_TOKEN holds a secret: set it on the base config" in response.content.decode()
    assert "hf_a" not in response.content.decode()
