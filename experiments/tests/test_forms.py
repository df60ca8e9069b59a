"""Validation of a submitted experiment, through `ExperimentSubmission` and through POST /api/experiments.

Both paths must say the same thing about bad input (one source of truth), under dotted error keys, and save
nothing when any part is invalid.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from experiments.actions.audit import Actor
from experiments.actions.experiments import do_create_experiment
from experiments.models import ApiToken, Experiment, Run

from .factories import (
    Mutation,
    experiment_payload,
    make_host,
    row_counts,
    set_baseline,
    set_candidate,
    set_profile,
    submission_of,
)

pytestmark = pytest.mark.django_db


INVALID = [
    pytest.param(set_candidate(env={"1BAD": "x"}), "candidates.0.env", "not a valid environment", id="env-name"),
    pytest.param(set_candidate(env={"A": "x\ny"}), "candidates.0.env", "newlines", id="env-newline"),
    # A newline must not let one value forge a second variable that the config never declared.
    pytest.param(set_candidate(env={"A": "x\nB=y"}), "candidates.0.env", "newlines", id="env-newline-forges-var"),
    pytest.param(set_candidate(env="A=1"), "candidates.0.env", "must be an object", id="env-not-object"),
    pytest.param(set_candidate(env={"A": ["x"]}), "candidates.0.env", "must be a string", id="env-value-list"),
    pytest.param(set_candidate(extra_args=["--tp", "4"]), "candidates.0.extra_args", "--tp is set by", id="tp"),
    # A string is not split (into characters, or otherwise): the API takes a list, as DESIGN.md shows.
    pytest.param(set_candidate(extra_args="--tp 4"), "candidates.0.extra_args", "list of strings", id="args-str"),
    pytest.param(set_candidate(extra_args=["--x", 1]), "candidates.0.extra_args", "list of strings", id="args-int"),
    pytest.param(set_candidate(extra_args=["--port", "1"]), "candidates.0.extra_args", "--port is set", id="port"),
    pytest.param(set_candidate(extra_args=["--port=1"]), "candidates.0.extra_args", "--port is set", id="port="),
    pytest.param(
        set_candidate(extra_args=["--speculative-num-st", "3"]),
        "candidates.0.extra_args",
        "--speculative-num-steps",
        id="flag-prefix",
    ),
    pytest.param(
        set_candidate(extra_args=["0.85", "--x"]), "candidates.0.extra_args", "must start with a flag", id="no-flag"
    ),
    pytest.param(
        set_candidate(speculative_num_draft_tokens=4),
        "candidates.0.speculative_num_draft_tokens",
        "steps + 1 = 3",
        id="topk1-draft-not-steps+1",
    ),
    pytest.param(
        set_candidate(speculative_eagle_topk=None, speculative_num_draft_tokens=None),
        "candidates.0.speculative_eagle_topk",
        "together",
        id="steps-alone",
    ),
    pytest.param(
        set_candidate(speculative_num_steps=None),
        "candidates.0.speculative_num_steps",
        "together",
        id="steps-missing",
    ),
    pytest.param(
        set_candidate(speculative_draft_model_path=""),
        "candidates.0.speculative_draft_model_path",
        "EAGLE3 needs a draft model path",
        id="no-draft-path",
    ),
    pytest.param(
        set_baseline(speculative_num_steps=2),
        "baseline.speculative_num_steps",
        "Only a speculative config",
        id="baseline-steps",
    ),
    pytest.param(
        set_baseline(speculative_draft_model_path="/models/draft"),
        "baseline.speculative_draft_model_path",
        "Only a speculative config",
        id="baseline-draft",
    ),
    pytest.param(set_profile(concurrency="0"), "profile.concurrency", "outside 1..", id="concurrency-0"),
    pytest.param(set_profile(concurrency="x"), "profile.concurrency", "not a whole number", id="concurrency-x"),
    pytest.param(set_profile(concurrency=""), "profile.concurrency", "required", id="concurrency-empty"),
    pytest.param(set_profile(concurrency=[0, 4]), "profile.concurrency", "outside 1..", id="concurrency-list-0"),
    pytest.param(set_profile(num_prompts=2), "profile.num_prompts", "At least 4 prompts", id="too-few-prompts"),
    pytest.param(set_profile(passes=0), "profile.passes", "between 1 and 50", id="passes-0"),
    pytest.param(set_candidate(name="baseline"), "candidates.0.name", "already named 'baseline'", id="dup-name"),
    pytest.param(set_candidate(tp_size=16), "candidates.0.tp_size", "8 GPUs, fewer than tp 16", id="tp>gpus"),
    pytest.param(set_baseline(tp_size=16), "baseline.tp_size", "8 GPUs, fewer than tp 16", id="baseline-tp>gpus"),
    pytest.param(
        set_candidate(log_metrics={"verify_ms": r"Target verify: ([\d.]+) ms"}),
        "candidates.0.log_metrics",
        "needs a named group (?P<verify_ms>...)",
        id="metric-without-group",
    ),
    pytest.param(
        set_candidate(log_metrics={"verify_ms": "(?P<verify_ms>[unclosed"}),
        "candidates.0.log_metrics",
        "not a valid regex",
        id="metric-bad-regex",
    ),
    pytest.param(
        set_candidate(expect={"log_has": ["x"]}),
        "candidates.0.expect",
        "Unknown expectation keys: log_has",
        id="expect",
    ),
    pytest.param(
        set_candidate(expect={"env_propagated": ["1BAD"]}),
        "candidates.0.expect",
        "not a valid environment",
        id="expect-env",
    ),
    pytest.param(
        set_candidate(expect={"log_contains": "Spec v2"}), "candidates.0.expect", "list of non-empty", id="expect-str"
    ),
    pytest.param(set_candidate(model_path="/models/a\nb"), "candidates.0.model_path", "newlines", id="path-newline"),
    pytest.param(lambda p: p.update(host="nowhere"), "host", "valid choice", id="unknown-host"),
    pytest.param(
        lambda p: p.update(candidates=[p["baseline"]] * 51), "candidates", "At most 50 candidates", id="too-many"
    ),
]


@pytest.fixture
def host():
    return make_host(name="gpu8")


def _payload_with(host, mutate: Mutation) -> dict[str, Any]:
    payload = copy.deepcopy(experiment_payload(host))
    mutate(payload)
    return payload


def test_it_accepts_the_design_example(host, owner):
    submission = submission_of(experiment_payload(host))

    assert submission.is_valid(), submission.errors
    experiment = do_create_experiment(actor=Actor(owner), **submission.experiment_fields())

    candidate = experiment.ordered_candidates()[0]
    assert candidate.env == {"NCCL_PROTO": "LL"}
    assert candidate.extra_args == ["--mem-fraction-static", "0.85"]
    assert candidate.expect["env_propagated"] == ["NCCL_PROTO"]
    assert experiment.profile.concurrency == [1, 4]
    assert Run.objects.filter(experiment=experiment).count() == 2


def test_it_accepts_a_baseline_measured_alone(host, owner):
    payload = experiment_payload(host)
    payload["candidates"] = []
    submission = submission_of(payload)

    assert submission.is_valid(), submission.errors
    experiment = do_create_experiment(actor=Actor(owner), **submission.experiment_fields())

    assert experiment.ordered_candidates() == []
    assert [run.config for run in experiment.run_set.all()] == [experiment.baseline]


@pytest.mark.parametrize("mutate, key, fragment", INVALID)
def test_it_refuses_invalid_input_under_a_dotted_key(host, mutate, key, fragment):
    submission = submission_of(_payload_with(host, mutate))

    assert not submission.is_valid()
    assert key in submission.errors, submission.errors
    assert fragment in " ".join(submission.errors[key])


# Where the API answers other than the form's 422 (api/refusals.py): its schema refuses the type first, in its own
# words; an id or name that names nothing is a 404; the launch policy's refusal a 403; fields that disagree a 409.
API_ANSWERS: dict[str, tuple[int, str | None]] = {
    "env-not-object": (422, "valid dictionary"),
    "args-str": (422, "valid list"),
    "args-int": (422, "valid string"),
    "expect": (422, "Extra inputs are not permitted"),
    "expect-str": (422, "valid list"),
    "too-many": (422, "at most 50 items"),
    "unknown-host": (404, "no host named 'nowhere'"),
    **{id_: (403, None) for id_ in ("tp", "port", "port=", "flag-prefix", "no-flag")},
    **{
        id_: (409, None)
        for id_ in (
            "topk1-draft-not-steps+1",
            "steps-alone",
            "steps-missing",
            "no-draft-path",
            "baseline-steps",
            "baseline-draft",
            "too-few-prompts",
            "dup-name",
            "tp>gpus",
            "baseline-tp>gpus",
            "metric-without-group",
        )
    },
}


@pytest.mark.parametrize("mutate, key, fragment", INVALID)
def test_it_refuses_invalid_input_through_the_api_and_saves_nothing(
    request, client, owner, host, mutate, key, fragment
):
    status, answer = API_ANSWERS.get(request.node.callspec.id, (422, None))
    _, token = ApiToken.issue(owner)
    before = row_counts()

    response = client.post(
        "/api/experiments",
        _payload_with(host, mutate),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )

    assert response.status_code == status, response.content
    # A 404 names its field first in the detail ("host: no host named ..."); the others under `errors`.
    errors = response.json().get("errors") or dict([response.json()["detail"].split(": ", 1)])
    # The schema names the very item (`candidates.0.extra_args.1`) inside the form's field.
    messages = [
        m for k, v in errors.items() if k == key or k.startswith(f"{key}.") for m in ([v] if isinstance(v, str) else v)
    ]
    assert messages, errors
    assert (answer or fragment) in " ".join(messages)
    assert row_counts() == before


def test_it_saves_nothing_when_only_the_last_candidate_is_invalid(client, owner, host):
    _, token = ApiToken.issue(owner)
    payload = experiment_payload(host)
    bad = {**payload["candidates"][0], "name": "eagle3-bad", "extra_args": ["--tp", "4"]}
    payload["candidates"].append(bad)
    before = row_counts()

    response = client.post(
        "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )

    assert response.status_code == 403  # the launch policy's: --tp is the config's own field
    assert list(response.json()["errors"]) == ["candidates.1.extra_args"]
    assert row_counts() == before


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(set_profile(concurrency="1, 4,16", num_prompts=16), id="concurrency-text"),
        pytest.param(set_profile(concurrency=[16, 1, 4, 4]), id="concurrency-unsorted-dup"),
        pytest.param(
            set_candidate(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4),
            id="topk1-steps+1",
        ),
        pytest.param(
            set_candidate(speculative_num_steps=3, speculative_eagle_topk=4, speculative_num_draft_tokens=8),
            id="topk4-free-draft",
        ),
        pytest.param(
            set_candidate(speculative_num_steps=None, speculative_eagle_topk=None, speculative_num_draft_tokens=None),
            id="spec-auto",
        ),
        pytest.param(set_candidate(extra_args=["--context-length", "131072", "--cuda-graph-max-bs=8"]), id="extra"),
        pytest.param(set_candidate(env={"HF_TOKEN": "b=c", "OMP_NUM_THREADS": 1}), id="env-equals-in-value"),
        pytest.param(set_candidate(log_metrics={}, expect={}), id="no-expect"),
    ],
)
def test_it_accepts_valid_variants(host, mutate):
    submission = submission_of(_payload_with(host, mutate))

    assert submission.is_valid(), submission.errors


def test_it_parses_concurrency_text_into_sorted_levels(host, owner):
    payload = _payload_with(host, set_profile(concurrency="16, 1, 4,16"))
    submission = submission_of(payload)

    assert submission.is_valid(), submission.errors
    assert do_create_experiment(actor=Actor(owner), **submission.experiment_fields()).profile.concurrency == [1, 4, 16]


def test_it_skips_the_gpu_check_while_the_inventory_is_unknown(owner):
    host = make_host(gpu_inventory=[])
    submission = submission_of(_payload_with(host, set_candidate(tp_size=16)))

    assert submission.is_valid(), submission.errors


def test_it_reports_every_invalid_part_at_once(host):
    def mutate(p: dict[str, Any]) -> None:
        p["baseline"]["speculative_num_steps"] = 2
        p["candidates"][0]["extra_args"] = ["--port", "1"]
        p["profile"]["concurrency"] = "x"

    submission = submission_of(_payload_with(host, mutate))

    assert not submission.is_valid()
    assert {"baseline.speculative_num_steps", "candidates.0.extra_args", "profile.concurrency"} <= set(
        submission.errors
    )
    assert Experiment.objects.count() == 0
