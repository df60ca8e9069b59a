"""An OpenAPI-driven fuzz of the whole JSON API (schemathesis): no input gives a 500, the schema tells the truth
(every status answered is documented, every answer fits its documented schema and content type, and a request the
schema calls valid is accepted), and every 4xx is a JSON object that names what was wrong (a 422 names the fields).

Schemathesis reads /api/openapi.json and generates, per operation, requests that fit the schema and requests that
do not. They go in-process to Django's WSGI handler as a member holding an API token (what a team's scripts are),
over a database with a host, configs, a finished experiment and its log, so that the ids it tries find rows too;
the bodies an admin may send are fuzzed as an admin below. Bounded and deterministic: a fixed number of examples
per operation, derandomized.
"""

from __future__ import annotations

import copy
import json
import os
import re
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config._checks import POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.core.result import Err
from schemathesis.python.wsgi import get_client as schemathesis_client
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from experiments.actions.audit import Actor
from experiments.actions.studies import do_start_study
from experiments.api.base import config_data, profile_data
from experiments.forms.studies import StudySubmission
from experiments.forms.sweeps import SweepForm
from experiments.models import AdaptiveSchedule, ApiToken, Host, Run

from .factories import MODELS, make_config, make_eagle_config, make_experiment, make_host, make_log, make_measurement

pytestmark = [pytest.mark.django_db(transaction=True)]

# Per operation and pass: ~30 operations x 2-4 passes, about a minute on two cores. Raise it for a deeper run.
EXAMPLES = int(os.environ.get("SPECDASH_FUZZ_EXAMPLES", "18"))
# The connection test asks a worker over Celery and waits up to 60 s (no worker serves this test): it is
# fuzzed with every input except an existing host's id, which is swapped for one that exists nowhere.
ASKS_A_WORKER = re.compile(r"/hosts/\{host_id\}/test$")
# A 422 names its fields: the forms' {"errors": {field: [...]}}, ninja's {"detail": [{"loc": [...]}]}, or a
# message that starts with the field's path ("profile: no profile with id 7") or names a parameter of the call.
FIELD_MESSAGE = re.compile(r"^[a-z_][\w.]*: ")
CONFORMANCE = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    positive_data_acceptance,
]
# A schema-valid request is refused only for what no schema states, with the status that says which (403 the launch
# policy, 404 a row or model that is not there, 409 fields that contradict each other or what is stored, 429 a
# quota: schemathesis accepts each by default). A body that carries a file's text may also get the 400 of a text
# that is not in a format the API reads (api/refusals.py), documented for those operations alone.
CARRIES_A_FILE = ("/api/prompt-sets", "/api/imports")
POSITIVE_STATUSES = [*POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES]
FUZZ_CONFIG = {
    "operations": [
        {
            "include-path": path,
            "checks": {"positive_data_acceptance": {"expected-statuses": [*POSITIVE_STATUSES, "400"]}},
        }
        for path in CARRIES_A_FILE
    ]
}


@pytest.fixture
def admin_token(django_user_model) -> str:
    admin = django_user_model.objects.create_superuser("fuzz-admin", password="fuzz-admin-pass")
    return ApiToken.issue(admin)[1]


@pytest.fixture
def member_token(member) -> str:
    return ApiToken.issue(member)[1]


@pytest.fixture
def seeded() -> dict[str, int]:
    """Rows for the generated requests to find, by path parameter: a host, a finished experiment, a run with a
    log, a study, an adaptive schedule (generated ids alone almost never hit a row)."""
    host = make_host(name="fuzz-host")
    baseline, candidate = make_config(name="baseline"), make_eagle_config(name="eagle3-2step")
    experiment = make_experiment(host=host, baseline=baseline, candidates=[candidate])
    runs = list(experiment.run_set.all())
    for run in runs:
        run.state = Run.State.SUCCEEDED
        run.save(update_fields=["state"])
        make_measurement(run, concurrency=1, output_throughput=100.0 if run.config_id == baseline.pk else 110.0)
        make_log(run, [["loading", "ready"], ["Decode batch. #running-req: 1"]])
    # other_id: the second of a diff (of two runs, or of two experiments: this one with itself).
    other_id = runs[-1].pk
    target = {"model_path": f"{MODELS}/kimi-k2.5-sim", "tp_size": 8}
    eagle = {
        **target,
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": f"{MODELS}/kimi-k2.5-sim-eagle3",
    }
    study = StudySubmission(
        {"name": "fuzz study", "host": host.name},
        config_data({**target, "name": "study baseline"}, "baseline"),
        profile_data({"concurrency": [1], "num_prompts": 4, "input_len": 16, "output_len": 16}),
        {"max_launches": 6, "tolerance": 0.02, "round_size": 2},
        sweep=SweepForm(
            {"speculative_num_steps": [1, 2], "speculative_eagle_topk": [1]}, base_data=config_data(eagle, "")
        ),
    )
    assert study.is_valid(), study.errors
    return {
        "host_id": host.pk,
        "experiment_id": experiment.pk,
        "run_id": runs[0].pk,
        "config_id": candidate.pk,
        "other_id": other_id,
        "study_id": do_start_study(actor=Actor.command(), **study.study_fields()).pk,
        "schedule_id": AdaptiveSchedule.objects.create(
            experiment=experiment,
            version=1,
            config_json='{"1": {"candidate_steps": [2]}}\n',
            bands=[{"low": 1, "high": 1, "config": candidate.name, "config_id": candidate.pk, "steps": 2}],
        ).pk,
    }


@pytest.fixture
def app() -> Iterator[WSGIHandler]:
    """Django's WSGI handler, keeping the test's database connection across requests (as Django's test client
    does), and with name resolution kept on this machine: a fuzzed host name is never looked up in DNS."""
    real_getaddrinfo = socket.getaddrinfo

    def local_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name != "localhost" and not re.fullmatch(r"[\d.]+|[0-9a-fA-F:]+", name):
            raise socket.gaierror(socket.EAI_NONAME, "not resolved during the fuzz")
        return real_getaddrinfo(host, *args, **kwargs)

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    socket.getaddrinfo = local_only
    try:
        yield WSGIHandler()
    finally:
        socket.getaddrinfo = real_getaddrinfo
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def _problem(status: int, content_type: str, body: bytes, parameters: set[str]) -> str | None:
    """What is wrong with a response, or None."""
    if status >= 500:
        return "server error"
    if status < 400:
        return None
    if not content_type.startswith("application/json"):
        return f"a {status} that is not JSON ({content_type})"
    try:
        data = json.loads(body)
    except ValueError:
        return f"a {status} whose body is not JSON"
    if not isinstance(data, dict) or not data:
        return f"a {status} whose body is not a JSON object"
    if status == 422 and not _names_fields(data, parameters):
        return f"a 422 that names no field: {data}"
    return None


def _names_fields(data: dict[str, Any], parameters: set[str]) -> bool:
    errors, detail = data.get("errors"), data.get("detail")
    if isinstance(errors, dict) and errors:
        return True
    if isinstance(detail, list) and detail:
        return all(isinstance(item, dict) and item.get("loc") for item in detail)
    if not isinstance(detail, str):
        return False
    return bool(FIELD_MESSAGE.match(detail)) or bool(parameters & set(re.findall(r"\w+", detail)))


def _mismatches(case: schemathesis.Case, response: Any, headers: dict[str, str]) -> list[str]:
    """Where the answer and the schema disagree."""
    try:
        case.validate_response(response, checks=CONFORMANCE, headers=headers)
    except (Failure, FailureGroup) as exc:
        failures = list(exc.exceptions) if isinstance(exc, FailureGroup) else [exc]
        return [f"{f.title}: {f.message.splitlines()[0] if f.message else ''}" for f in failures]
    return []


@pytest.mark.usefixtures("private_queue")
@pytest.mark.slow
def test_it_answers_a_members_every_generated_request_as_its_schema_says(app, member_token, seeded):
    headers = {"Authorization": f"Bearer {member_token}"}
    config = schemathesis.Config.from_dict(FUZZ_CONFIG)
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", app, headers=headers, config=config)  # needs a login
    found: dict[tuple[str, str, int, str], str] = {}
    calls = 0

    def check(case: schemathesis.Case) -> None:
        nonlocal calls
        operation, parameters = case.operation, {p.name for p in case.operation.iter_parameters()}
        if ASKS_A_WORKER.search(operation.path):
            _never_an_existing_host(case)
        response = case.call(headers=headers)
        calls += 1
        content_type = (response.headers.get("content-type") or [""])[0]
        problem = _problem(response.status_code, content_type, response.content, parameters)
        for mismatch in [] if problem else _mismatches(case, response, headers):
            key = (operation.method.upper(), operation.path, response.status_code, mismatch[:60])
            found.setdefault(key, f"{mismatch} <- {case.as_curl_command(headers=headers)}")
        if problem:
            key = (operation.method.upper(), operation.path, response.status_code, problem[:60])
            found.setdefault(key, f"{problem} <- {case.as_curl_command(headers=headers)}")

    for result in schema.get_all_operations():
        if isinstance(result, Err):
            pytest.fail(f"an operation of /api/openapi.json cannot be read: {result.err()}")
        operation = result.ok()
        ids = {p.name: seeded[p.name] for p in operation.iter_parameters() if p.location == "path"}
        passes: list[tuple[GenerationMode, dict[str, int] | None]] = [
            (GenerationMode.POSITIVE, None),
            (GenerationMode.NEGATIVE, None),
        ]
        if ids and not ASKS_A_WORKER.search(operation.path):
            # The same again on the seeded rows; negative only where a query or body is left to break.
            passes.append((GenerationMode.POSITIVE, ids))
            if len(list(operation.iter_parameters())) > len(ids) or operation.body:
                passes.append((GenerationMode.NEGATIVE, ids))
        for mode, path_parameters in passes:
            strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)
            _fuzz(strategy, check)

    assert not found, "\n".join(f"{m} {p} -> {s}: {why}" for (m, p, s, _), why in found.items())
    assert calls >= 500


def _fuzz(strategy: Any, check: Any) -> None:
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: schemathesis.Case) -> None:
        check(case)

    run()


def _never_an_existing_host(case: schemathesis.Case) -> None:
    host_id: Any = (case.path_parameters or {}).get("host_id")
    try:
        taken = Host.objects.filter(pk=int(host_id)).exists()
    except (TypeError, ValueError, OverflowError):
        return
    if taken:
        case.path_parameters["host_id"] = (
            Host.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        ) + 10**6


DROP = object()  # a mutation that removes the key
# Values that have broken parsers before: wrong types, bounds of the database's integers, huge and odd strings.
ODD = st.sampled_from([None, True, -1, 0, 2**31, 2**63, -(2**63) - 1, 1e308, -0.0, "", "0", "1e3", "x" * 5000,
                       "\x00", "../../etc/passwd", "$(id)", "%s%n", [], {}, [1, "a"], {"a": {"b": None}}])  # fmt: skip
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into a JSON document, containers included."""
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    return [path for key, child in children for path in [(*prefix, key), *_paths(child, (*prefix, key))]]


def _mutated(body: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    body = copy.deepcopy(body)
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    if value is DROP:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return body


def _valid_bodies(seeded: dict[str, int]) -> dict[str, dict[str, Any]]:
    from .factories import experiment_payload

    experiment = experiment_payload(Host.objects.get(pk=seeded["host_id"]))
    return {
        "/api/experiments": experiment,
        "/api/configs": experiment["candidates"][0],
        "/api/profiles": experiment["profile"],
        "/api/hosts": {"name": "fuzz-new", "address": "127.0.0.1", "username": "gpu", "port": 22, "server_port": 30000,
                       "work_dir": "specdash-work", "launcher": "python3 -m sglang.launch_server", "python": "python3"},
    }  # fmt: skip


@pytest.mark.usefixtures("private_queue")
def test_it_answers_every_mutation_of_a_valid_body_without_a_500(app, admin_token, seeded):
    # Schemathesis sees these bodies as free-form objects (the forms validate them), so it rarely gets past the
    # first field: here each request is a valid body with one value replaced by any JSON, or one key removed.
    headers = {"Authorization": f"Bearer {admin_token}"}
    found: dict[tuple[str, int, str], str] = {}
    created: list[str] = []
    for path, body in _valid_bodies(seeded).items():
        client = schemathesis_client(app)
        if client.post(path, json=body, headers=headers).status_code == 201:
            created.append(path)
        _fuzz_body(client, path, body, headers, found)

    assert "/api/experiments" in created  # the unmutated body is valid, so the mutations start from a real request
    assert not found, "\n".join(f"POST {p} -> {s}: {why}" for (p, s, _), why in found.items())


def _fuzz_body(client: Any, path: str, body: dict[str, Any], headers: dict[str, str], found: dict) -> None:
    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(where=st.sampled_from(_paths(body)), value=st.one_of(st.just(DROP), ODD, JSON))
    def run(where: tuple, value: Any) -> None:
        sent = _mutated(body, where, value)
        response = client.post(path, json=sent, headers=headers)
        problem = _problem(response.status_code, response.content_type or "", response.get_data(), set())
        if response.status_code == 422 and problem and "errors" in (response.get_json(silent=True) or {}):
            problem = None  # the forms' errors name fields by their own keys
        if problem:
            found.setdefault(
                (path, response.status_code, problem[:60]),
                f"{problem} <- body{list(where)} = {json.dumps(value)[:200] if value is not DROP else '(removed)'}",
            )

    run()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("get", "/api/no-such-operation", 404),
        ("get", "/api/experiments/1%2F2", 404),  # an id holding a slash matches no route
        ("delete", "/api/hosts", 405),
        ("put", "/api/configs", 405),
    ],
)
def test_it_answers_json_outside_the_declared_operations_too(client, admin_token, method, path, status):
    response = getattr(client, method)(path, headers={"Authorization": f"Bearer {admin_token}"})

    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    assert set(response.json()) == {"detail"}
    if status == 405:
        assert response["Allow"]


@pytest.mark.django_db
def test_it_answers_json_to_a_body_over_the_upload_limit(client, admin_token, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = client.post(
        "/api/configs", b"[" + b"1," * 1000 + b"1]", content_type="application/json",
        headers={"Authorization": f"Bearer {admin_token}"},
    )  # fmt: skip

    assert (response.status_code, response["Content-Type"]) == (400, "application/json")
    assert response.json()["detail"] == "The request body has 2,003 bytes; the API accepts at most 1,000."


# What the deeper fuzz (SPECDASH_FUZZ_EXAMPLES=300) found: a NUL character reached PostgreSQL, which refuses it in
# text and in jsonb, and the request ended in a 500. Now refused with field errors.


@pytest.mark.django_db
def test_it_refuses_a_nul_character_in_a_log_search(admin_token, seeded):
    client = Client(raise_request_exception=False)
    response = client.get(
        f"/api/runs/{seeded['run_id']}/log", {"q": "a\x00"}, headers={"Authorization": f"Bearer {admin_token}"}
    )

    assert response.status_code == 422
    assert list(response.json()["errors"]) == ["q"]


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/configs", "/api/experiments"])
def test_it_refuses_a_nul_character_in_a_configs_expectations(admin_token, seeded, path, private_queue):
    from .factories import experiment_payload

    body = experiment_payload(Host.objects.get(pk=seeded["host_id"]))
    candidate = body["candidates"][0]
    candidate["expect"]["log_contains"] = ["ready\x00"]
    client = Client(raise_request_exception=False)
    response = client.post(
        path, candidate if path == "/api/configs" else body, content_type="application/json",
        headers={"Authorization": f"Bearer {admin_token}"},
    )  # fmt: skip

    assert response.status_code == 422
    assert response.json()["errors"]
