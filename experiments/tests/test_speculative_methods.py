"""Every speculative method with its own settings, rules and checks at submit (issue #52): each method's settings are
rows of the launch-field table (`launch_fields`, kept in `engine_options`), refused for another method by name and
out of bounds with a clear message; each method's rules say what the engine says, in its words where it has them;
the host's SGLang version and --help listing refuse a method or a setting it lacks; NEXTN/mtp need the target's MTP
layers and STANDALONE's draft is checked as a draft. Through the API, the browser form and the pure rules."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

import pytest
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.models import ApiToken, Experiment, Host, ServerConfig
from experiments.rules import launch_fields, launch_policy, model_checks

from .factories import MODELS, experiment_payload, make_host

pytestmark = pytest.mark.django_db

TARGET = f"{MODELS}/kimi-k2.5-sim"
DRAFT = f"{MODELS}/kimi-k2.5-sim-eagle3"
NGRAM = {"speculative_algorithm": "NGRAM", "speculative_draft_model_path": None}


@pytest.fixture
def auth(member) -> dict[str, str]:
    return {"Authorization": f"Bearer {ApiToken.issue(member)[1]}"}


def _candidate(**fields: Any) -> dict[str, Any]:
    """The payload's EAGLE3 candidate made another method's: `fields` replace its speculative settings."""
    base = {"name": "cand", "model_path": TARGET, "tp_size": 8}
    return {k: v for k, v in {**base, **fields}.items() if v is not None}


def _post(client, auth, host: Host, candidate: dict[str, Any], baseline: dict[str, Any] | None = None):
    body = copy.deepcopy(experiment_payload(host))
    body["candidates"] = [candidate]
    if baseline is not None:
        body["baseline"] = baseline
    return client.post("/api/experiments", body, content_type="application/json", headers=auth)


def _error(response, key: str) -> str:
    errors = response.json()["errors"]
    assert key in errors, errors
    return " ".join(errors[key])


# --- a method's settings, accepted and launched --------------------------------------------------------------------


def test_it_takes_ngram_settings_and_launches_them_after_the_method(client, auth):
    options = {
        "speculative_ngram_min_match_window_size": 2,
        "speculative_ngram_max_match_window_size": 8,
        "speculative_ngram_max_bfs_breadth": 4,
        "speculative_ngram_match_type": "PROB",
    }

    response = _post(client, auth, make_host(), _candidate(**NGRAM, engine_options=options))

    assert response.status_code == 201, response.json()
    config = ServerConfig.objects.get(name="cand")
    assert config.engine_options == options
    _, words = launch_fields.launch_words("sglang", config.launch_spec())
    method_at = words.index("--speculative-algorithm")
    assert words[method_at:] == [
        "--speculative-algorithm", "NGRAM",
        "--speculative-ngram-min-match-window-size", "2", "--speculative-ngram-max-match-window-size", "8",
        "--speculative-ngram-max-bfs-breadth", "4", "--speculative-ngram-match-type", "PROB",
    ]  # fmt: skip


def test_it_sends_vllms_ngram_lookup_lengths_in_the_speculative_config(client, auth):
    host = make_host(vllm_launcher="vllm serve")
    candidate = _candidate(
        engine="vllm", speculative_algorithm="ngram", speculative_num_steps=4,
        engine_options={"prompt_lookup_min": 2, "prompt_lookup_max": 5},
    )  # fmt: skip
    baseline = {"name": "baseline", "engine": "vllm", "model_path": TARGET, "tp_size": 8}

    response = _post(client, auth, host, candidate, baseline)

    assert response.status_code == 201, response.json()
    _, words = launch_fields.launch_words("vllm", ServerConfig.objects.get(name="cand").launch_spec())
    assert json.loads(words[words.index("--speculative-config") + 1]) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5,
    }  # fmt: skip


# The launch columns and free fields before per-method settings existed: a config that sets none of the new ones
# must hash exactly as it did (its stored hash names it in history, comparisons and the CLI gate).
_COLUMNS_BEFORE = (
    "model_path", "served_model_name", "tp_size", "speculative_algorithm", "speculative_draft_model_path",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "extra_args", "env", "expect",
    "log_metrics",
)  # fmt: skip


def test_a_config_without_a_method_setting_hashes_as_before(client, auth):
    response = _post(client, auth, make_host(), experiment_payload(make_host())["candidates"][0])
    assert response.status_code == 201, response.json()
    config = ServerConfig.objects.get(name="eagle3-2step")

    before = {name: getattr(config, name) for name in _COLUMNS_BEFORE}
    canonical = json.dumps(before, sort_keys=True, separators=(",", ":"))

    assert config.content_hash == hashlib.sha256(canonical.encode()).hexdigest()
    assert config.engine_options == {}


def test_a_method_setting_changes_the_hash():
    plain = ServerConfig(name="n", model_path=TARGET, speculative_algorithm="NGRAM")
    tuned = ServerConfig(
        name="n", model_path=TARGET, speculative_algorithm="NGRAM",
        engine_options={"speculative_ngram_max_bfs_breadth": 4},
    )  # fmt: skip

    assert plain.compute_hash() != tuned.compute_hash()


# --- each method's rules, in the engine's words ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidate", "key", "says"),
    [
        pytest.param(
            _candidate(**NGRAM, engine_options={"speculative_ngram_min_match_window_size": 9,
                                                "speculative_ngram_max_match_window_size": 4}),
            "engine_options.speculative_ngram_min_match_window_size",
            "The min match window (9) is above the max match window (4)",
            id="ngram-window",
        ),
        pytest.param(
            _candidate(**NGRAM, engine_options={"speculative_ngram_min_bfs_breadth": 5,
                                                "speculative_ngram_max_bfs_breadth": 2}),
            "engine_options.speculative_ngram_min_bfs_breadth",
            "The min BFS breadth (5) is above the max BFS breadth (2)",
            id="ngram-breadth",
        ),
        pytest.param(
            _candidate(**NGRAM, speculative_eagle_topk=4),
            "speculative_eagle_topk",
            "speculative_eagle_topk = speculative_ngram_max_bfs_breadth",
            id="ngram-topk",
        ),
        pytest.param(
            _candidate(**NGRAM, engine_options={"speculative_ngram_branch_length": 8,
                                                "speculative_ngram_max_trie_depth": 8}),
            "engine_options.speculative_ngram_max_trie_depth",
            "one setting under two SGLang versions' names",
            id="ngram-depth-twice",
        ),
        pytest.param(
            _candidate(speculative_algorithm="DFLASH"),
            "speculative_draft_model_path",
            "SGLang refuses it: 'DFLASH speculative decoding requires setting --speculative-draft-model-path.'",
            id="dflash-no-draft",
        ),
        pytest.param(
            _candidate(speculative_algorithm="DFLASH", speculative_draft_model_path=DRAFT, speculative_eagle_topk=4),
            "speculative_eagle_topk",
            "'DFLASH only supports speculative_eagle_topk == 1; overriding speculative_eagle_topk=4 to 1.'",
            id="dflash-topk",
        ),
        pytest.param(
            _candidate(speculative_algorithm="DFLASH", speculative_draft_model_path=DRAFT, speculative_num_steps=3),
            "speculative_num_steps",
            "DFLASH only supports speculative_num_steps == 1",
            id="dflash-steps",
        ),
        pytest.param(
            _candidate(speculative_algorithm="DFLASH", speculative_draft_model_path=DRAFT,
                       speculative_num_draft_tokens=8, engine_options={"speculative_dflash_block_size": 16}),
            "speculative_num_draft_tokens",
            "For DFLASH they must match. speculative_num_draft_tokens=8, speculative_dflash_block_size=16.",
            id="dflash-block-vs-draft-tokens",
        ),
        pytest.param(
            _candidate(speculative_algorithm="DFLASH", speculative_draft_model_path=DRAFT,
                       engine_options={"speculative_dflash_block_size": 16, "speculative_draft_window_size": 8}),
            "engine_options.speculative_draft_window_size",
            "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). "
            "window_size=8, block_size=16.",
            id="dflash-window",
        ),
        pytest.param(
            _candidate(speculative_algorithm="DSPARK", speculative_num_draft_tokens=8,
                       engine_options={"speculative_dspark_block_size": 5}),
            "speculative_num_draft_tokens",
            "DSpark speculative_num_draft_tokens must equal gamma + 1 (= 6 for gamma=5), but got "
            "speculative_num_draft_tokens=8.",
            id="dspark-gamma",
        ),
        pytest.param(
            _candidate(speculative_algorithm="DSPARK", speculative_num_draft_tokens=1),
            "speculative_num_draft_tokens",
            "DSpark speculative_num_draft_tokens must be >= 2 (= gamma + 1), got 1.",
            id="dspark-too-few",
        ),
        pytest.param(
            _candidate(speculative_algorithm="STANDALONE"),
            "speculative_draft_model_path",
            "STANDALONE needs a draft model path",
            id="standalone-no-draft",
        ),
    ],
)  # fmt: skip
def test_it_refuses_each_methods_known_unsupported_combinations(client, auth, candidate, key, says):
    response = _post(client, auth, make_host(), candidate)

    assert response.status_code == 409, response.json()
    assert says in _error(response, f"candidates.0.{key}")
    assert not Experiment.objects.exists()


def test_it_quotes_vllms_own_refusal_of_ngram_lookup_lengths(client, auth):
    host = make_host(vllm_launcher="vllm serve")
    candidate = _candidate(
        engine="vllm", speculative_algorithm="ngram", speculative_num_steps=4,
        engine_options={"prompt_lookup_min": 6, "prompt_lookup_max": 3},
    )  # fmt: skip
    baseline = {"name": "baseline", "engine": "vllm", "model_path": TARGET, "tp_size": 8}

    response = _post(client, auth, host, candidate, baseline)

    assert response.status_code == 409
    assert _error(response, "candidates.0.engine_options.prompt_lookup_min") == (
        "vLLM refuses it: 'prompt_lookup_min=6 must be <= prompt_lookup_max=3'."
    )


# --- the attack: a method's setting given for another method --------------------------------------------------------


@pytest.mark.parametrize(
    ("candidate", "key", "says"),
    [
        (
            _candidate(speculative_algorithm="EAGLE3", speculative_draft_model_path=DRAFT, speculative_num_steps=2,
                       speculative_eagle_topk=1, speculative_num_draft_tokens=3,
                       engine_options={"speculative_ngram_max_bfs_breadth": 4}),
            "engine_options.speculative_ngram_max_bfs_breadth",
            "N-gram max BFS breadth is a setting of NGRAM: this config runs method EAGLE3; leave it empty.",
        ),
        (
            _candidate(**NGRAM, engine_options={"speculative_dflash_block_size": 16}),
            "engine_options.speculative_dflash_block_size",
            "DFLASH block size is a setting of DFLASH: this config runs method NGRAM",
        ),
        (
            _candidate(speculative_algorithm="DFLASH", speculative_draft_model_path=DRAFT,
                       engine_options={"speculative_dspark_block_size": 5}),
            "engine_options.speculative_dspark_block_size",
            "is a setting of DSPARK: this config runs method DFLASH",
        ),
        (
            _candidate(**NGRAM, engine_options={"prompt_lookup_min": 2}),
            "engine_options.prompt_lookup_min",
            "SGLang has no prompt_lookup_min setting",
        ),
    ],
)  # fmt: skip
def test_it_refuses_a_methods_setting_for_another_method_naming_its_method(client, auth, candidate, key, says):
    response = _post(client, auth, make_host(), candidate)

    assert response.status_code == 409, response.json()
    assert says in _error(response, f"candidates.0.{key}")


def test_it_refuses_a_methods_setting_on_a_baseline_naming_the_method(client, auth):
    baseline = {"name": "baseline", "model_path": TARGET, "tp_size": 8,
                "engine_options": {"speculative_ngram_capacity": 1000}}  # fmt: skip

    response = _post(client, auth, make_host(), experiment_payload(make_host())["candidates"][0], baseline)

    assert response.status_code == 409
    assert "is a setting of NGRAM: this config runs no method (a baseline)" in _error(
        response, "baseline.engine_options.speculative_ngram_capacity"
    )


def test_it_refuses_a_method_setting_smuggled_in_as_an_extra_flag(client, auth):
    candidate = _candidate(**NGRAM, extra_args=["--speculative-ngram-max-bfs-breadth", "4"])

    response = _post(client, auth, make_host(), candidate)

    assert response.status_code == 403, response.json()  # what the launch policy forbids a member
    assert _error(response, "candidates.0.extra_args") == (
        "--speculative-ngram-max-bfs-breadth is set by the config's own fields (--speculative-ngram-max-bfs-breadth); "
        "use those fields instead."
    )
    assert "--speculative-ngram-max-bfs-breadth" in launch_fields.managed_flags("sglang")


# --- bounds: a huge or negative number, a string, a flag-looking value -----------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("speculative_ngram_capacity", 10**12, "less than or equal to 1000000000"),
        ("speculative_ngram_max_bfs_breadth", -1, "greater than or equal to 1"),
        ("speculative_ngram_max_bfs_breadth", 0, "greater than or equal to 1"),
        ("speculative_ngram_max_bfs_breadth", "four", "Enter a whole number"),
        ("speculative_ngram_max_bfs_breadth", "--trust-remote-code", "Enter a whole number"),
        ("speculative_ngram_max_bfs_breadth", "4 --trust-remote-code", "Enter a whole number"),
        ("speculative_ngram_match_type", "--trust-remote-code", "Select a valid choice"),
        ("speculative_ngram_match_type", "DFS", "Select a valid choice"),
        ("speculative_ngram_match_type", ["BFS"], "Select a valid choice"),
    ],
)
def test_it_refuses_a_method_setting_out_of_bounds_with_a_clear_message(client, auth, name, value, says):
    response = _post(client, auth, make_host(), _candidate(**NGRAM, engine_options={name: value}))

    assert response.status_code == 422, response.json()
    assert says in _error(response, f"candidates.0.engine_options.{name}")
    assert not ServerConfig.objects.exists()


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.integers(), st.text(max_size=12), st.booleans(), st.none(), st.floats()))
def test_the_table_refuses_any_value_its_bounds_do_not_hold(value):
    for engine in launch_fields.ENGINE_NAMES:
        for row in launch_fields.fields(engine):
            if not row.methods:
                continue
            spec = {"speculative_algorithm": row.methods[0], "engine_options": {row.name: value}}
            refused = any(field == row.name for field, _ in launch_fields.field_refusals(engine, spec))
            if not launch_fields.is_set(value):
                held = True
            elif row.kind == launch_fields.INT:
                assert row.bounds is not None
                held = type(value) is int and row.bounds[0] <= value <= row.bounds[1]
            else:
                held = value in row.choices
            assert refused == (not held), (engine, row.name, value)


# --- what the host's SGLang is known to take -------------------------------------------------------------------------

_FLAGS_0_5_9 = [
    "--model-path", "--tp-size", "--speculative-algorithm", "--speculative-draft-model-path", "--mem-fraction-static",
    "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
    "--speculative-ngram-min-match-window-size", "--speculative-ngram-max-match-window-size",
    "--speculative-ngram-min-bfs-breadth", "--speculative-ngram-max-bfs-breadth", "--speculative-ngram-match-type",
    "--speculative-ngram-branch-length", "--speculative-ngram-capacity",
]  # fmt: skip


def _listed_flags_host(version: str) -> Host:
    host = make_host()
    host.server_flags = {"launcher": host.launcher, "sglang_version": version, "flags": _FLAGS_0_5_9}
    host.server_flags_at = timezone.now()
    host.save()
    return host


@pytest.mark.parametrize(
    ("version", "method", "says"),
    [
        ("0.5.2", "NGRAM", "SGLang 0.5.2 does not know the method NGRAM: it came with SGLang 0.5.3."),
        ("0.5.1.post3", "STANDALONE", "SGLang 0.5.1.post3 does not know the method STANDALONE"),
        ("0.5.9", "DFLASH", "SGLang 0.5.9 does not know the method DFLASH: it came with SGLang 0.5.14."),
        ("0.5.9", "DSPARK", "it came with SGLang 0.5.14"),
    ],
)
def test_it_refuses_a_method_the_hosts_sglang_version_lacks_naming_the_version(client, auth, version, method, says):
    candidate = _candidate(speculative_algorithm=method, speculative_draft_model_path=DRAFT)

    response = _post(client, auth, _listed_flags_host(version), candidate)

    assert response.status_code == 409, response.json()
    assert says in _error(response, "candidates.0.speculative_algorithm")


def test_it_takes_a_method_the_hosts_version_knows_and_says_nothing_where_the_version_is_unknown(client, auth):
    assert _post(client, auth, _listed_flags_host("0.5.9"), _candidate(**NGRAM)).status_code == 201
    candidate = _candidate(speculative_algorithm="DFLASH", speculative_draft_model_path=DRAFT)
    assert _post(client, auth, make_host(), {**candidate, "name": "unknown"}).status_code == 201


def test_it_refuses_a_method_setting_whose_flag_the_hosts_sglang_does_not_list(client, auth):
    candidate = _candidate(**NGRAM, engine_options={"speculative_ngram_max_trie_depth": 8})

    response = _post(client, auth, _listed_flags_host("0.5.9"), candidate)

    assert response.status_code == 409
    assert "SGLang 0.5.9 on " in _error(response, "candidates.0.engine_options.speculative_ngram_max_trie_depth")
    assert "does not know --speculative-ngram-max-trie-depth" in response.content.decode()
    branch = _candidate(**NGRAM, engine_options={"speculative_ngram_branch_length": 8})
    assert _post(client, auth, _listed_flags_host("0.5.9"), branch).status_code == 201


# --- model checks: MTP layers, STANDALONE's draft --------------------------------------------------------------------


def _model(name: str, **text_config: Any) -> dict[str, Any]:
    numbers = {"max_position_embeddings": 262144, "vocab_size": 163840, **text_config}
    return {"path": f"{MODELS}/{name}", "name": name, "text_config": numbers}


def _listed_models_host(*models: dict[str, Any], **fields: Any) -> Host:
    listing = [*models, _model("kimi-k2.5-sim-eagle3")]
    return make_host(model_inventory={"models_root": MODELS, "models": listing}, model_inventory_at=timezone.now(),
                     **fields)  # fmt: skip


@pytest.mark.parametrize(("engine", "method"), [("sglang", "NEXTN"), ("vllm", "mtp")])
def test_it_refuses_an_mtp_method_on_a_target_without_mtp_layers(client, auth, engine, method):
    host = _listed_models_host(_model("kimi-k2.5-sim", num_nextn_predict_layers=0), vllm_launcher="vllm serve")
    candidate = _candidate(engine=engine, speculative_algorithm=method, speculative_num_steps=2)
    if engine == "sglang":
        candidate.update(speculative_eagle_topk=1, speculative_num_draft_tokens=3)
    baseline = {"name": "baseline", "engine": engine, "model_path": TARGET, "tp_size": 8}

    response = _post(client, auth, host, candidate, baseline)

    assert response.status_code == 409, response.json()
    assert "drafts with the MTP layers of the target's own checkpoint, and its config.json has none" in _error(
        response, "candidates.0.speculative_algorithm"
    )


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(_model("kimi-k2.5-sim", num_nextn_predict_layers=1), id="has-mtp-layers"),
        pytest.param(_model("kimi-k2.5-sim"), id="listed-before-the-count-was-kept"),
    ],
)
def test_it_takes_nextn_on_a_target_with_mtp_layers_or_where_that_is_unknown(client, auth, target):
    candidate = _candidate(speculative_algorithm="NEXTN", speculative_num_steps=2, speculative_eagle_topk=1,
                           speculative_num_draft_tokens=3)  # fmt: skip

    response = _post(client, auth, _listed_models_host(target), candidate)

    assert response.status_code == 201, response.json()


def test_it_takes_nextn_with_an_exported_head_as_the_draft(client, auth):
    host = _listed_models_host(_model("kimi-k2.5-sim", num_nextn_predict_layers=0))
    candidate = _candidate(speculative_algorithm="NEXTN", speculative_draft_model_path=DRAFT, speculative_num_steps=2,
                           speculative_eagle_topk=1, speculative_num_draft_tokens=3)  # fmt: skip

    assert _post(client, auth, host, candidate).status_code == 201


@pytest.mark.parametrize(
    ("draft", "says"),
    [
        (_model("small-vocab", vocab_size=32000), "The draft model's vocab_size (32000) differs from the target's"),
        (_model("short-context", max_position_embeddings=4096), "max_position_embeddings (4096) is below the target"),
    ],
)
def test_it_checks_a_standalone_draft_like_a_draft(client, auth, draft, says):
    host = _listed_models_host(_model("kimi-k2.5-sim"), draft)
    candidate = _candidate(speculative_algorithm="STANDALONE", speculative_draft_model_path=draft["path"])

    response = _post(client, auth, host, candidate)

    assert response.status_code == 409, response.json()
    assert says in _error(response, "candidates.0.speculative_draft_model_path")


# --- the browser form ------------------------------------------------------------------------------------------------


def test_the_form_marks_each_method_setting_with_its_methods_and_engines(owner_client):
    make_host(name="gpu8")
    page = owner_client.get("/experiments/new/").content.decode()

    for engine in launch_fields.ENGINE_NAMES:
        for row in launch_fields.fields(engine):
            if not row.methods:
                continue
            tag = re.search(rf'<(?:input|select)[^>]*name="cand-0-option_{row.name}"[^>]*>', page)
            assert tag is not None, row.name
            assert f'data-methods="{" ".join(row.methods)}"' in tag.group(0)
            assert f'data-engines="{engine}"' in tag.group(0)
    # A baseline has no method: none of them is on its block.
    assert 'name="baseline-option_speculative_ngram_capacity"' not in page
    assert "<script>" not in page  # CSP: the page's behaviour is its static file's


def _form_post(page: str, **fields: str) -> dict[str, str]:
    post: dict[str, str] = {}
    outside_template = re.sub(r'<template id="candidate-template">.*?</template>', "", page, flags=re.S)
    for tag in re.findall(r"<(?:input|select|textarea)[^>]*>", outside_template):
        name = re.search(r'name="([^"]+)"', tag)
        if name and name.group(1) != "csrfmiddlewaretoken":
            value = re.search(r'value="([^"]*)"', tag)
            post[name.group(1)] = value.group(1) if value else ""
    post.update({"experiment-name": "from the form", "experiment-host": "gpu8", "cand-0-name": "ngram"})
    post.update({key: "" for key in ("baseline-expect", "baseline-log_metrics", "cand-0-expect", "cand-0-log_metrics")})
    return {**post, **fields}


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        (
            {
                "cand-0-option_speculative_ngram_min_bfs_breadth": "5",
                "cand-0-option_speculative_ngram_max_bfs_breadth": "2",
            },
            "The min BFS breadth (5) is above the max BFS breadth (2)",
        ),
        ({"cand-0-option_speculative_dflash_block_size": "16"}, "DFLASH block size is a setting of DFLASH"),
        ({"cand-0-option_speculative_ngram_capacity": "-5"}, "greater than or equal to 1"),
        ({"cand-0-option_speculative_ngram_match_type": "--trust-remote-code"}, "Select a valid choice"),
    ],
)  # fmt: skip
def test_the_form_refuses_each_rule_next_to_its_field(owner_client, fields, says):
    make_host(name="gpu8")
    page = owner_client.get("/experiments/new/").content.decode()
    post = _form_post(page, **{"cand-0-speculative_algorithm": "NGRAM", "cand-0-speculative_draft_model_path": ""})
    for key in ("cand-0-speculative_num_steps", "cand-0-speculative_eagle_topk", "cand-0-speculative_num_draft_tokens"):
        post[key] = ""

    response = owner_client.post("/experiments/new/", {**post, **fields})

    assert response.status_code == 400
    assert says in response.content.decode().replace("&#x27;", "'")
    assert not Experiment.objects.exists()


def test_the_form_takes_an_ngram_candidate_with_its_settings(owner_client):
    make_host(name="gpu8")
    page = owner_client.get("/experiments/new/").content.decode()
    post = _form_post(page, **{"cand-0-speculative_algorithm": "NGRAM", "cand-0-speculative_draft_model_path": ""})
    for key in ("cand-0-speculative_num_steps", "cand-0-speculative_eagle_topk", "cand-0-speculative_num_draft_tokens"):
        post[key] = ""
    post["cand-0-option_speculative_ngram_max_bfs_breadth"] = "6"
    post["cand-0-option_speculative_ngram_match_type"] = "BFS"

    response = owner_client.post("/experiments/new/", post)

    assert response.status_code == 302, response.content.decode()[:2000]
    config = ServerConfig.objects.get(name="ngram")
    assert config.engine_options == {"speculative_ngram_max_bfs_breadth": 6, "speculative_ngram_match_type": "BFS"}


# --- the pure rules --------------------------------------------------------------------------------------------------


def test_it_lists_a_methods_fields_and_an_engine_versions_methods():
    assert [row.name for row in launch_fields.method_fields("sglang", "DFLASH")] == [
        "speculative_dflash_block_size", "speculative_draft_window_size",
    ]  # fmt: skip
    assert [row.name for row in launch_fields.method_fields("vllm", "suffix")] == [
        "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
    ]  # fmt: skip
    assert launch_fields.method_fields("sglang", "EAGLE3") == ()
    assert launch_fields.methods_of("sglang", "0.4.10.post2") == ("EAGLE", "EAGLE3", "NEXTN")
    assert launch_fields.methods_of("sglang", "0.5.3.post3") == ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
    assert "UNO" in launch_fields.methods_of("sglang", "0.5.23")
    assert launch_fields.methods_of("sglang", None) == launch_fields.methods_of("sglang", "not a version")
    assert launch_fields.method_version_refusal("sglang", "EAGLE3", "0.4.6.post5") is None
    assert launch_fields.method_version_refusal("sglang", "NGRAM", None) is None


@pytest.mark.parametrize(
    ("text", "numbers"),
    [("0.5.3.post3", (0, 5, 3)), ("v0.5.14", (0, 5, 14)), ("0.5.2rc2", (0, 5, 2)), ("", None), ("dev", None)],
)
def test_it_reads_a_version(text, numbers):
    assert launch_fields.version_numbers(text) == numbers


def test_it_reads_the_mtp_layers_of_a_checkpoint():
    assert model_checks.mtp_layers_of({"model_type": "deepseek_v3", "num_nextn_predict_layers": 1}) == 1
    assert model_checks.mtp_layers_of({"model_type": "qwen3_next", "mtp_num_hidden_layers": 2}) == 2
    assert model_checks.mtp_layers_of({"model_type": "llama"}) == 0
    assert model_checks.mtp_layers_of({"text_config": {"vocab_size": 7}}) is None  # a listing of before
    assert model_checks.mtp_problem("sglang", "EAGLE3", {"model_type": "llama"}) is None
    assert model_checks.mtp_problem("vllm", "mtp", {"model_type": "llama"}) is not None


def test_every_method_setting_is_a_flag_or_key_the_policy_manages():
    for row in launch_fields.fields("sglang"):
        if row.methods:
            assert row.key in launch_fields.managed_flags("sglang")
            assert launch_policy.extra_args_refusals([row.key, "1"], launch_fields.managed_flags("sglang"))


def test_it_quotes_vllms_refusal_of_a_draft_model_of_another_vocabulary(client, auth):
    draft = _model("small-vocab", vocab_size=32000)
    host = _listed_models_host(_model("kimi-k2.5-sim"), draft, vllm_launcher="vllm serve")
    candidate = _candidate(engine="vllm", speculative_algorithm="draft_model", speculative_num_steps=3,
                           speculative_draft_model_path=draft["path"])  # fmt: skip
    baseline = {"name": "baseline", "engine": "vllm", "model_path": TARGET, "tp_size": 8}

    response = _post(client, auth, host, candidate, baseline)

    assert response.status_code == 409, response.json()
    assert _error(response, "candidates.0.speculative_draft_model_path") == (
        "vLLM refuses this pair: 'Target and draft model should have the same vocabulary size. Target model "
        "vocab_size=163840. Draft model vocab_size=32000. Using models with different tokenizers can cause "
        "out-of-bounds errors during speculative decoding.'"
    )


def test_the_api_schema_states_each_method_setting_with_its_bounds_and_methods(client, auth):
    schema = client.get("/api/openapi.json", headers=auth).json()["components"]["schemas"]["ConfigIn"]
    options = schema["properties"]["engine_options"]["properties"]

    assert options["speculative_ngram_match_type"]["anyOf"][0] == {"enum": ["BFS", "PROB"]}
    assert options["speculative_ngram_capacity"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 10**9}
    assert options["prompt_lookup_min"]["description"] == "prompt_lookup_min (vLLM, method ngram)"
    assert "method DFLASH" in options["speculative_dflash_block_size"]["description"]
    assert schema["properties"]["engine_options"]["additionalProperties"] is False


def test_a_picked_ngram_config_fills_its_settings_and_is_reused_unchanged(owner_client):
    from experiments.reads.config_history import config_box_values

    make_host(name="gpu8")
    stored = ServerConfig.objects.create(
        name="ngram", model_path=TARGET, tp_size=8, speculative_algorithm="NGRAM",
        engine_options={"speculative_ngram_max_bfs_breadth": 6, "speculative_ngram_match_type": "PROB"},
    )  # fmt: skip
    boxes = config_box_values(stored)
    assert (
        boxes["option_speculative_ngram_max_bfs_breadth"] == 6 and boxes["option_speculative_dflash_block_size"] == ""
    )
    page = owner_client.get("/experiments/new/").content.decode()
    post = _form_post(page, **{f"cand-0-{key}": "" if value is None else str(value) for key, value in boxes.items()})

    response = owner_client.post("/experiments/new/", post)

    assert response.status_code == 302, response.content.decode()[:2000]
    assert Experiment.objects.get().ordered_candidates() == [stored]
