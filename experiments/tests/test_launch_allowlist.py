"""The launch allowlist (issue 24), tested as the attacks that got through the old denylist: a member's POST
/api/experiments carrying each one is refused with a 422 that names the flag or variable, and saves nothing. Then
the rule itself, as a property of the pure policy: nothing outside the lists (and a host's extra prefixes) is
accepted, however it is spelled."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.models import ApiToken
from experiments.rules.launch_env import ENV_RULES
from experiments.rules.launch_fields import SGLANG, managed_flags
from experiments.rules.launch_flags import FLAG_RULES, HOST_FLAG_RULES, NEVER_FLAGS
from experiments.rules.launch_policy import env_name_refusal, env_refusals, extra_args_refusals, prefix_refusal

from .factories import experiment_payload, make_host, row_counts, set_candidate

ENV, ARGS = "candidates.0.env", "candidates.0.extra_args"
ADMIN = "an admin can"

# (what the member sends, where the error goes, the words it must contain)
ATTACKS = [
    # Code loaded into the server.
    pytest.param({"extra_args": ["--trust-remote-code"]}, ARGS, "--trust-remote-code", id="trust-remote-code"),
    pytest.param({"extra_args": ["--model-impl", "transformers"]}, ARGS, "--model-impl", id="model-impl"),
    pytest.param(
        {"extra_args": ["--json-model-override-args", '{"auto_map": {"AutoModel": "evil--m.M"}}']},
        ARGS,
        "--json-model-override-args",
        id="auto-map",
    ),
    pytest.param({"env": {"HF_ENDPOINT": "http://10.9.9.9:8080"}}, ENV, "HF_ENDPOINT", id="hf-endpoint"),
    pytest.param({"env": {"HF_HUB_OFFLINE": "0"}}, ENV, "HF_HUB_OFFLINE", id="hub-online"),
    pytest.param({"env": {"SGLANG_USE_MODELSCOPE": "1"}}, ENV, "SGLANG_USE_MODELSCOPE", id="modelscope"),
    pytest.param({"env": {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}}, ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", id="pkl"),
    pytest.param({"env": {"TRITON_KERNEL_OVERRIDE": "1"}}, ENV, "TRITON_KERNEL_OVERRIDE", id="kernel-override"),
    pytest.param(
        {"env": {"FLASHINFER_CUBINS_REPOSITORY": "http://10.9.9.9/"}}, ENV, "FLASHINFER_CUBINS_REPOSITORY", id="cubins"
    ),
    # Listening, or connecting out.
    pytest.param({"extra_args": ["--dist-init-addr", "0.0.0.0:5000"]}, ARGS, "--dist-init-addr", id="dist-init"),
    pytest.param({"extra_args": ["--nnodes", "2"]}, ARGS, "--nnodes", id="nnodes"),
    pytest.param(
        {"extra_args": ["--otlp-traces-endpoint", "10.9.9.9:4317"]}, ARGS, "--otlp-traces-endpoint", id="otlp"
    ),
    pytest.param({"extra_args": ["--tool-server", "http://10.9.9.9"]}, ARGS, "--tool-server", id="tool-server"),
    pytest.param({"extra_args": ["--load-format", "remote"]}, ARGS, "--load-format", id="load-remote"),
    pytest.param({"extra_args": ["--disaggregation-mode", "prefill"]}, ARGS, "--disaggregation-mode", id="disagg"),
    pytest.param(
        {"extra_args": ["--disaggregation-bootstrap-port", "8998"]}, ARGS, "--disaggregation-bootstrap", id="disagg-p"
    ),
    pytest.param({"env": {"NCCL_RAS_ADDR": "0.0.0.0:28028"}}, ENV, "NCCL_RAS_ADDR", id="nccl-ras"),
    pytest.param({"env": {"NCCL_COMM_ID": "10.9.9.9:1234"}}, ENV, "NCCL_COMM_ID", id="nccl-comm-id"),
    pytest.param({"env": {"MC_TCP_BIND_ADDRESS": "0.0.0.0"}}, ENV, "MC_TCP_BIND_ADDRESS", id="mooncake"),
    pytest.param({"env": {"GLOO_SOCKET_IFNAME": "eth0"}}, ENV, "GLOO_SOCKET_IFNAME", id="gloo"),
    # Files read wherever they say.
    pytest.param({"extra_args": ["--chat-template", "/etc/passwd"]}, ARGS, "--chat-template", id="chat-template"),
    pytest.param({"extra_args": ["--completion-template", "/etc/shadow"]}, ARGS, "--completion-template", id="compl"),
    pytest.param({"extra_args": ["--ssl-ca-certs", "/root/.ssh/id_rsa"]}, ARGS, "--ssl-ca-certs", id="ssl-ca"),
    pytest.param({"env": {"HF_DATASETS_CACHE": "/tmp/x"}}, ENV, "HF_DATASETS_CACHE", id="datasets-cache"),
    pytest.param({"env": {"HF_XET_CACHE": "/tmp/x"}}, ENV, "HF_XET_CACHE", id="xet-cache"),
    pytest.param({"env": {"HF_ASSETS_CACHE": "/tmp/x"}}, ENV, "HF_ASSETS_CACHE", id="assets-cache"),
    pytest.param({"env": {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/x"}}, ENV, "CUDA_MPS_PIPE_DIRECTORY", id="mps-pipe"),
    pytest.param({"env": {"CUDA_MPS_LOG_DIRECTORY": "/tmp/x"}}, ENV, "CUDA_MPS_LOG_DIRECTORY", id="mps-log"),
    pytest.param({"env": {"CUDA_COREDUMP_PIPE": "/tmp/p"}}, ENV, "CUDA_COREDUMP_PIPE", id="coredump"),
    # Resources without bound, and who may call the server.
    pytest.param({"extra_args": ["--tokenizer-worker-num", "1000"]}, ARGS, "--tokenizer-worker-num", id="workers"),
    pytest.param({"extra_args": ["--watchdog-timeout", "1e9"]}, ARGS, "--watchdog-timeout", id="watchdog"),
    pytest.param({"extra_args": ["--api-key", "mine"]}, ARGS, "--api-key", id="api-key"),
    pytest.param({"extra_args": ["--admin-api-key", "mine"]}, ARGS, "--admin-api-key", id="admin-api-key"),
    # The same flag in other spellings: argparse, a shell or a copy-paste may read each as --trust-remote-code.
    pytest.param({"extra_args": ["--trust_remote_code"]}, ARGS, "--trust_remote_code", id="underscores"),
    pytest.param({"extra_args": ["--Trust-Remote-Code"]}, ARGS, "--Trust-Remote-Code", id="capitals"),
    pytest.param({"extra_args": ["\u2013trust-remote-code"]}, ARGS, "\u2013trust-remote-code", id="en-dash"),
    pytest.param({"extra_args": ["\u2014trust-remote-code"]}, ARGS, "\u2014trust-remote-code", id="em-dash"),
    pytest.param({"extra_args": ["\u2212\u2212trust-remote-code"]}, ARGS, "trust-remote-code", id="minus-signs"),
    pytest.param({"extra_args": ["\u2010\u2010trust-remote-code"]}, ARGS, "trust-remote-code", id="unicode-hyphen"),
    pytest.param({"extra_args": ["-trust-remote-code"]}, ARGS, "-trust-remote-code", id="one-dash"),
    pytest.param({"extra_args": ["--trust-remote"]}, ARGS, "--trust-remote", id="abbreviation"),
    # Line and paragraph separators: str.splitlines() breaks at them, so logs and NAME=VALUE text would lie.
    pytest.param({"extra_args": ["--mem-fraction-static", "0.8\u2028"]}, ARGS, "line separators", id="u2028"),
    pytest.param({"extra_args": ["--mem-fraction-static", "0.8\u2029"]}, ARGS, "line separators", id="u2029"),
    pytest.param({"env": {"NCCL_PROTO": "LL\x85NCCL_ALGO=Ring"}}, ENV, "line separators", id="u0085"),
    pytest.param({"env": {"HF_TOKEN": "hf_x\u2028LD_PRELOAD=/x.so"}}, ENV, "line separators", id="token-u2028"),
    pytest.param({"env": {"NCCL_PROTO": "LL\x1eSimple"}}, ENV, "line separators", id="record-separator"),
]


def _post(client, token: str, payload: dict[str, Any]):
    return client.post(
        "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )


@pytest.mark.django_db
@pytest.mark.parametrize(("fields", "key", "named"), ATTACKS)
def test_it_refuses_each_attack_a_member_sends_and_saves_nothing(client, member, fields, key, named):
    host = make_host(name="gpu8", extra_env_prefixes=["SIMHOST_"])
    _, token = ApiToken.issue(member)
    payload = copy.deepcopy(experiment_payload(host))
    set_candidate(**fields)(payload)
    before = row_counts()

    response = _post(client, token, payload)

    # The launch policy's refusal (403: an admin may allow some for a host); a line separator is a character the
    # API's schema refuses in every value (422).
    assert response.status_code == (422 if named == "line separators" else 403), response.content
    errors = " ".join(response.json()["errors"][key])
    assert named in errors, errors
    assert row_counts() == before


@pytest.mark.django_db
def test_it_tells_the_member_who_can_allow_an_unlisted_flag_or_variable(client, member):
    host = make_host(name="gpu8")
    _, token = ApiToken.issue(member)
    payload = copy.deepcopy(experiment_payload(host))
    args = ["--some-future-plugin", "x", "--tokenizer-worker-num", "2", "--trust-remote-code"]
    set_candidate(extra_args=args, env={"HF_ENDPOINT": "http://x", "MYLAB_KNOB": "1"})(payload)

    errors = _post(client, token, payload).json()["errors"]

    assert [(ADMIN in e, "launcher" in e, "host's extra flags" in e) for e in errors[ARGS]] == [
        (True, True, False),  # a flag on no list: the host's launcher
        (True, False, True),  # one an admin may allow for a host
        (False, False, False),  # one that loads code: never
    ]
    assert "--trust-remote-code is never settable" in errors[ARGS][2]
    assert all(ADMIN in e for e in errors[ENV]), errors[ENV]
    assert any("extra variable prefixes" in e for e in errors[ENV])  # MYLAB_: a host may add that prefix


@pytest.mark.django_db
def test_it_still_takes_what_serving_tunes_from_a_member(client, member):
    host = make_host(name="gpu8", extra_env_prefixes=["SIMHOST_"])
    _, token = ApiToken.issue(member)
    payload = copy.deepcopy(experiment_payload(host))
    args = ["--mem-fraction-static", "0.85", "--cuda-graph-max-bs=8", "--context-length", "131072"]
    args += ["--disable-cuda-graph", "--max-running-requests", "32", "--chunked-prefill-size", "-1"]
    args += ["--enable-torch-compile", "--attention-backend", "fa3", "--kv-cache-dtype", "fp8_e5m2", "--enable-metrics"]
    env = {"NCCL_PROTO": "LL,Simple", "NCCL_ALGO": "^Tree", "SGLANG_ENABLE_SPEC_V2": "True", "HF_TOKEN": "hf_a b"}
    env |= {"CUDA_VISIBLE_DEVICES": "0,1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "HF_HUB_OFFLINE": "1"}
    env |= {"SIMHOST_FAULTS": "zombie", "EAGLE3_PROFILE": "1", "OMP_NUM_THREADS": "8"}
    set_candidate(extra_args=args, env=env)(payload)

    response = _post(client, token, payload)

    assert response.status_code == 201, response.content


def test_every_listed_flag_and_variable_is_canonical_and_no_flag_abbreviates_a_managed_one():
    for flag, rule in FLAG_RULES.items():
        assert extra_args_refusals([flag]) == ([f"{flag} needs a value: {rule.text}"] if rule.takes_value else [])
    # An allowed flag that is a prefix of a field's flag would let argparse read it as that field, unless it is a
    # flag of its own (argparse takes an exact match first): only --speculative-adaptive is, and it stays accepted
    # while its abbreviations of the managed --speculative-adaptive-config are refused.
    prefixes = {(flag, m) for flag in FLAG_RULES for m in managed_flags(SGLANG) if m != flag and m.startswith(flag)}
    assert prefixes == {("--speculative-adaptive", "--speculative-adaptive-config")}
    assert extra_args_refusals(["--speculative-adaptive"], managed_flags(SGLANG)) == []
    for abbreviation in ("--speculative-adaptive-c", "--speculative-adaptive-config"):
        (refusal,) = extra_args_refusals([abbreviation, "/tmp/x.json"], managed_flags(SGLANG))
        assert "(--speculative-adaptive-config); use those fields instead" in refusal
    assert all(env_name_refusal(name) is None for name in ENV_RULES)


def test_a_host_may_not_add_a_prefix_over_the_engines_listed_variables():
    for prefix in ("HF_", "NCCL_", "NCC", "SGLANG_", "CUDA_", "TORCH_", "MC_", "GLOO_", "FLASHINFER_"):
        assert prefix_refusal(prefix) is not None, prefix
        assert env_name_refusal(f"{prefix}ENDPOINT", [prefix]) is not None  # a stored one opens nothing either
    assert prefix_refusal("SIMHOST_") is None


# Flag-shaped text in every spelling: ASCII and Unicode dashes, cases, underscores, dots, digits, `=value` tails.
_DASH = st.sampled_from(["--", "-", "\u2013", "\u2014", "\u2212\u2212", "\u2010\u2010", "\uff0d\uff0d", "---"])
_WORDS = st.from_regex(r"[A-Za-z0-9_.]{1,12}(-[A-Za-z0-9_.]{1,12}){0,4}", fullmatch=True)
_LISTED = st.sampled_from(sorted({*FLAG_RULES, *HOST_FLAG_RULES}))
_FLAG = st.one_of(
    st.builds(lambda d, w: d + w, _DASH, _WORDS),
    st.sampled_from(sorted({*HOST_FLAG_RULES, *NEVER_FLAGS})),  # a host's flags, and those never allowed
    st.builds(lambda f: f[:-1], _LISTED),  # near misses of listed names
    st.builds(lambda f: f.replace("-", "_").replace("__", "--", 1), _LISTED),
    st.builds(lambda f: f.upper(), _LISTED),
)
# What a host row may hold: flags of the host list, and (stored before a rule, or around the form) any other.
_HOST_FLAGS = st.lists(st.sampled_from(sorted({*HOST_FLAG_RULES, *NEVER_FLAGS, "--tokenizer-worker"})), max_size=4)
_VALUE = st.one_of(st.just([]), st.builds(lambda v: [v], st.sampled_from(["1", "0.5", "auto", "x", "/etc/passwd"])))


@settings(max_examples=300, deadline=None)
@given(flag=_FLAG, value=_VALUE, equals=st.booleans(), host_flags=_HOST_FLAGS)
def test_it_accepts_no_flag_outside_the_allowlist_and_the_hosts_allowed_flags(flag, value, equals, host_flags):
    args = [f"{flag}={value[0]}"] if equals and value else [flag, *value]

    accepted = extra_args_refusals(args, managed_flags(SGLANG), host_flags) == []

    if accepted:
        assert flag in FLAG_RULES or (flag in HOST_FLAG_RULES and flag in host_flags), (args, host_flags)
    if flag not in FLAG_RULES:
        assert extra_args_refusals(args, managed_flags(SGLANG)) != []  # a host that allows nothing takes no other flag


_HOST_PREFIXES = ["SIMHOST_", "MYLAB_"]
_ENV_NAME = st.one_of(
    st.from_regex(r"[A-Z_][A-Z0-9_]{0,30}", fullmatch=True),
    st.builds(lambda p, s: p + s, st.sampled_from(["NCCL_", "SGLANG_", "CUDA_", "TORCH_", "HF_", "SIMHOST_"]), _WORDS),
    st.builds(lambda n, s: n + s, st.sampled_from(sorted(ENV_RULES)), st.sampled_from(["_", "S", "_PATH", "X"])),
)


@settings(max_examples=300, deadline=None)
@given(name=_ENV_NAME, value=st.sampled_from(["1", "LL", "0,1", "x"]))
def test_it_accepts_no_variable_outside_the_allowlist_and_the_hosts_prefixes(name, value):
    accepted = env_refusals({name: value}, _HOST_PREFIXES) == []

    if accepted:
        assert name in ENV_RULES or name.startswith(tuple(_HOST_PREFIXES)), name
    if name not in ENV_RULES:
        assert env_refusals({name: value}) != []  # a host without extra prefixes takes no unlisted name at all
