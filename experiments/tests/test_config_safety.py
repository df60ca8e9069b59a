"""Config safety at submit: environment variables outside the allowlist, flags that load code or files, values that
would read as flags, and every number and string out of bounds are refused with a field error, by the browser's
forms and the JSON API alike; a host's extra prefixes widen the allowlist for that host only. And a run's warnings
(a log metric switched off) show on its page."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from experiments.forms import (
    BenchmarkProfileForm,
    ServerConfigForm,
    apply_profile_defaults,
    profile_form_data,
)
from experiments.models import ApiToken, Experiment
from experiments.rules.log_metrics import TIMEOUT_KIND, timeout_warning

from .factories import (
    Mutation,
    experiment_payload,
    make_host,
    make_run,
    row_counts,
    set_candidate,
    set_profile,
    submission_of,
)

pytestmark = pytest.mark.django_db


def _payload(host, mutate: Mutation) -> dict[str, Any]:
    payload = copy.deepcopy(experiment_payload(host))
    mutate(payload)
    return payload


ENV, ARGS = "candidates.0.env", "candidates.0.extra_args"
NOT_ALLOWED = "not an allowed environment variable"
REFUSED = [
    pytest.param(set_candidate(env={"LD_PRELOAD": "/tmp/x.so"}), ENV, f"LD_PRELOAD: {NOT_ALLOWED}", id="LD_PRELOAD"),
    pytest.param(
        set_candidate(env={"PYTHONWARNINGS": "ignore::x.Y"}), ENV, f"PYTHONWARNINGS: {NOT_ALLOWED}", id="py-w"
    ),
    pytest.param(set_candidate(env={"PERL5OPT": "-Mx"}), ENV, f"PERL5OPT: {NOT_ALLOWED}", id="PERL5OPT"),
    pytest.param(set_candidate(env={"BROWSER": "sh -c x"}), ENV, f"BROWSER: {NOT_ALLOWED}", id="BROWSER"),
    pytest.param(set_candidate(env={"BASH_ENV": "/tmp/x"}), ENV, f"BASH_ENV: {NOT_ALLOWED}", id="BASH_ENV"),
    pytest.param(set_candidate(env={"PATH": "/tmp"}), ENV, f"PATH: {NOT_ALLOWED}", id="PATH"),
    pytest.param(
        set_candidate(env={"NCCL_NET_PLUGIN": "/tmp/x.so"}), ENV, "NCCL_NET_PLUGIN: not an allowed", id="plugin"
    ),
    pytest.param(set_candidate(env={"CUDA_INJECTION64_PATH": "/x.so"}), ENV, "CUDA_INJECTION64_PATH: not", id="inject"),
    pytest.param(
        set_candidate(env={"SIMHOST_FAULTS": "zombie"}),
        ENV,
        "SIMHOST_FAULTS: not an allowed environment variable: it is not on the list of variables a member may set",
        id="other-prefix",
    ),
    pytest.param(set_candidate(env={"NCCL_X": "a" * 4097}), ENV, "longer than 4096", id="env-value-size"),
    pytest.param(set_candidate(env={f"NCCL_X{i}": "1" for i in range(65)}), ENV, "At most 64", id="env-count"),
    pytest.param(set_candidate(extra_args=["--config", "/tmp/a.yaml"]), ARGS, "--config is never", id="config"),
    pytest.param(set_candidate(extra_args=["--custom-weight-loader", "os.system"]), ARGS, "is never", id="loader"),
    pytest.param(
        set_candidate(extra_args=["--tokenizer-path", "evil/repo"]),
        ARGS,
        "--tokenizer-path is never settable",
        id="tokenizer",
    ),
    pytest.param(set_candidate(extra_args=["--x"] * 65), ARGS, "At most 64 extra arguments", id="args-count"),
    pytest.param(set_candidate(extra_args=["--x", "y" * 1025]), ARGS, "longer than 1024", id="arg-size"),
    pytest.param(set_candidate(model_path="--config=/tmp/a"), "candidates.0.model_path", "must not start", id="path-"),
    pytest.param(
        set_candidate(served_model_name="-x"), "candidates.0.served_model_name", "must not start", id="served"
    ),
    pytest.param(set_candidate(model_path="/m/" + "a" * 600), "candidates.0.model_path", "at most 512", id="path-long"),
    pytest.param(set_candidate(name="n" * 129), "candidates.0.name", "at most 128", id="name-long"),
    pytest.param(set_candidate(name="a\x1bb"), "candidates.0.name", "control characters", id="name-escape"),
    pytest.param(set_candidate(tp_size=65), "candidates.0.tp_size", "between 1 and 64", id="tp"),
    pytest.param(
        set_candidate(speculative_num_steps=17, speculative_num_draft_tokens=18),
        "candidates.0.speculative_num_steps",
        "between 1 and 16",
        id="steps",
    ),
    pytest.param(
        set_candidate(speculative_num_steps=3, speculative_eagle_topk=65, speculative_num_draft_tokens=8),
        "candidates.0.speculative_eagle_topk",
        "between 1 and 64",
        id="topk",
    ),
    pytest.param(
        set_candidate(speculative_num_steps=3, speculative_eagle_topk=4, speculative_num_draft_tokens=257),
        "candidates.0.speculative_num_draft_tokens",
        "between 1 and 256",
        id="draft",
    ),
    pytest.param(
        set_candidate(speculative_num_steps=2**40, speculative_num_draft_tokens=3),
        "candidates.0.speculative_num_steps",
        "between 1 and 16",
        id="steps-overflow",
    ),
    pytest.param(
        set_candidate(log_metrics={f"m{i}": f"(?P<m{i}>a)" for i in range(9)}),
        "candidates.0.log_metrics",
        "At most 8 log metrics",
        id="metrics-count",
    ),
    pytest.param(
        set_candidate(log_metrics={"m": "(?P<m>a)" + "a" * 500}), "candidates.0.log_metrics", "longer than 500", id="re"
    ),
    pytest.param(
        set_candidate(expect={"log_contains": ["x"] * 65}), "candidates.0.expect", "at most 64 strings", id="expect-n"
    ),
    pytest.param(
        set_candidate(expect={"log_contains": ["x" * 1001]}), "candidates.0.expect", "at most 1000", id="expect-len"
    ),
    pytest.param(set_profile(concurrency=[4097]), "profile.concurrency", "outside 1..4096", id="concurrency"),
    pytest.param(
        set_profile(concurrency=list(range(1, 34)), num_prompts=64), "profile.concurrency", "At most 32", id="levels"
    ),
    pytest.param(set_profile(input_len=2**20 + 1), "profile.input_len", "between 1 and 1048576", id="input-len"),
    pytest.param(set_profile(output_len=2**20 + 1), "profile.output_len", "between 2 and 1048576", id="output-len"),
    pytest.param(set_profile(num_prompts=100_001), "profile.num_prompts", "between 1 and 100000", id="prompts"),
    pytest.param(set_profile(passes=51), "profile.passes", "between 1 and 50", id="passes"),
    pytest.param(set_profile(launches=51), "profile.launches", "between 1 and 50", id="launches"),
    pytest.param(set_profile(seed=2**31), "profile.seed", "between -2147483648 and 2147483647", id="seed"),
    pytest.param(
        set_profile(request_timeout_s=86_401), "profile.request_timeout_s", "between 1 and 86400", id="timeout"
    ),
    pytest.param(lambda p: p.update(name="e" * 201), "name", "at most 200", id="experiment-name"),
]


@pytest.fixture
def host():
    return make_host(name="gpu8")


@pytest.mark.parametrize("mutate, key, fragment", REFUSED)
def test_it_refuses_unsafe_or_unbounded_values_with_a_field_error(host, mutate, key, fragment):
    submission = submission_of(_payload(host, mutate))

    assert not submission.is_valid()
    assert key in submission.errors, submission.errors
    assert fragment in " ".join(submission.errors[key]), submission.errors[key]


# What the API's schema states (types, bounds, lengths, characters) is a 422; the rest of REFUSED is the launch
# policy's refusal of a name or value, a 403.
STATED_BY_THE_SCHEMA = {
    "env-value-size",
    "env-count",
    "args-count",
    "arg-size",
    "path-",
    "served",
    "path-long",
    "name-long",
    "name-escape",
    "tp",
    "steps",
    "topk",
    "draft",
    "steps-overflow",
    "metrics-count",
    "re",
    "expect-n",
    "expect-len",
    "concurrency",
    "levels",
    "input-len",
    "output-len",
    "prompts",
    "passes",
    "launches",
    "seed",
    "timeout",
    "experiment-name",
}


@pytest.mark.parametrize("mutate, key, fragment", REFUSED)
def test_it_refuses_them_through_the_api_and_saves_nothing(request, client, owner, host, mutate, key, fragment):
    _, token = ApiToken.issue(owner)
    before = row_counts()

    response = client.post(
        "/api/experiments",
        _payload(host, mutate),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )

    # What the schema states (422), or the launch policy's refusal of a name or value (403).
    expected = 422 if request.node.callspec.id in STATED_BY_THE_SCHEMA else 403
    assert response.status_code == expected, response.content
    assert fragment in " ".join(response.json()["errors"][key])
    assert row_counts() == before


def test_it_refuses_the_browsers_env_text_with_every_problem_named():
    form = ServerConfigForm({"name": "c", "model_path": "/m", "tp_size": 1, "env_text": "LD_PRELOAD=/x.so\nNCCL_A=1"})

    assert not form.is_valid()
    assert form.errors["env_text"] == [
        "LD_PRELOAD: not an allowed environment variable: the loader, an interpreter or the shell reads it as code "
        "or as where code is (no host may allow it).",
        "NCCL_A: not an allowed environment variable: it is not on the list of variables a member may set "
        "(an admin can set it for a host, in the host's shell setup).",
    ]


def test_it_allows_a_hosts_extra_prefixes_on_that_host_only(owner):
    sim = make_host(name="sim", extra_env_prefixes=["SIMHOST_"])
    plain = make_host(name="plain")
    knobs = set_candidate(env={"SIMHOST_FAULTS": "zombie", "NCCL_PROTO": "LL"})

    assert submission_of(_payload(sim, knobs)).is_valid()
    refused = submission_of(_payload(plain, knobs))
    assert not refused.is_valid()
    assert list(refused.errors) == ["candidates.0.env"]
    # An extra prefix never unlocks the loader's variables.
    assert not submission_of(_payload(sim, set_candidate(env={"SIMHOST_X": "1", "LD_PRELOAD": "/x.so"}))).is_valid()


def test_it_keeps_the_variables_serving_needs(host):
    env = {
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
        "SGLANG_ENABLE_SPEC_V2": "True",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "EAGLE3_PROFILE": "1",
    }

    submission = submission_of(_payload(host, set_candidate(env=env)))

    assert submission.is_valid(), submission.errors


def test_it_names_an_experiments_profile_within_its_column(client, owner, host):
    _, token = ApiToken.issue(owner)
    payload = {**experiment_payload(host), "name": "e" * 200}

    response = client.post(
        "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )

    assert response.status_code == 201, response.content
    profile = Experiment.objects.get().profile
    assert profile.name == ("e" * 200 + " profile")[:128]


def test_it_bounds_a_stored_profiles_numbers_too():
    form = BenchmarkProfileForm(profile_form_data(apply_profile_defaults({"concurrency": [1], "input_len": 2**31})))

    assert not form.is_valid()
    assert "input_len" in form.errors


def test_it_shows_a_runs_warnings_on_its_page(owner_client):
    run = make_run(
        warnings=[{"kind": TIMEOUT_KIND, "message": timeout_warning("x"), "at": "2025-01-01T10:11:12+00:00"}]
    )

    content = owner_client.get(f"/runs/{run.pk}/").content.decode()

    assert 'id="warnings"' in content
    assert TIMEOUT_KIND in content
    assert "The log metric &#x27;x&#x27; took more than 25 ms" in content
    assert 'id="warnings"' not in owner_client.get(f"/runs/{make_run().pk}/").content.decode()
