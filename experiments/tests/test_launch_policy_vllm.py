"""The launch policy for vLLM (issue 51), pure: which `vllm serve` flags and VLLM_* variables a config may carry,
their bounds, the spellings vLLM's parser reads beside the canonical one (dotted keys, underscores, short forms), the
flags an admin may allow for a host, and that a config naming no engine is judged exactly as SGLang's was."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.rules import launch_flags
from experiments.rules.launch_env import ENV_GROUPS, ENV_RULES
from experiments.rules.launch_policy import (
    FLAGS_BY_ENGINE,
    MAX_HOST_FLAGS,
    engine_refusal,
    env_name_refusal,
    env_refusals,
    extra_args_refusals,
    flag_rules,
    host_flag_refusal,
    host_flag_refusal_any_engine,
    launch_refusals,
    prefix_refusal,
)
from experiments.rules.vllm_launch_flags import FLAG_RULES, HOST_FLAG_RULES, NEVER_FLAGS, SHORT_FLAGS

# The flags a vLLM launch takes from the config's own fields (the positional model aside), as the launch fields
# table states them: the address, the speculative JSON and its shorthands, the TP size.
MANAGED = (
    "--model",
    "--served-model-name",
    "--tensor-parallel-size",
    "-tp",
    "--host",
    "--port",
    "--speculative-config",
    "-sc",
    "--spec-method",
    "--spec-model",
    "--spec-tokens",
)
# SGLang's, and both engines' together (what a form that does not know the engine yet may pass).
SGLANG_MANAGED = (
    *("--model-path", "--model", "--tp-size", "--tp", "--tensor-parallel-size", "--host", "--port"),
    *("--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps"),
    *("--speculative-eagle-topk", "--speculative-num-draft-tokens", "--speculative-adaptive-config"),
)
BOTH_MANAGED = (*MANAGED, *SGLANG_MANAGED, "--disable-log-stats")


def vllm_refusals(args: list[str], extra_flags: list[str] | None = None) -> list[str]:
    return extra_args_refusals(args, MANAGED, extra_flags or (), engine="vllm")


# ---- the never list -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", sorted(set(NEVER_FLAGS) - set(MANAGED)))
def test_each_never_flag_is_refused_with_its_reason_on_any_host(flag):
    every_host_flag = sorted({*HOST_FLAG_RULES, *NEVER_FLAGS})

    (refusal,) = vllm_refusals([flag, "x"], every_host_flag)

    assert refusal == f"{flag} is never settable in a config: it {NEVER_FLAGS[flag]} (no host may allow it)"
    assert host_flag_refusal(flag, "vllm") == f"{flag} {NEVER_FLAGS[flag]}: no host may allow it"


@pytest.mark.parametrize(
    ("flag", "reason"),
    [
        ("--trust-remote-code", "loads code into the server"),
        ("--hf-overrides", "loads code into the server"),
        ("--compilation-config", "loads code into the server"),
        ("--worker-extension-cls", "loads code into the server"),
        ("--tool-parser-plugin", "loads code into the server"),
        ("--middleware", "loads code into the server"),
        ("--chat-template", "reads or writes files wherever it says"),
        ("--tokenizer", "reads or writes files wherever it says"),
        ("--allowed-local-media-path", "reads or writes files wherever it says"),
        ("--headless", "listens or connects out"),
        ("--kv-transfer-config", "listens or connects out"),
        ("--distributed-executor-backend", "connects to a Ray cluster or loads an executor class by name"),
        ("--api-key", "changes who may call the server"),
        ("--root-path", "changes who may call the server"),
        ("--disable-log-stats", "turns off the statistics and metrics specdash measures a run with"),
    ],
)
def test_the_worst_flags_say_what_they_would_do(flag, reason):
    assert NEVER_FLAGS[flag] == reason


def test_the_address_is_the_configs_own_even_where_it_is_never_settable():
    assert vllm_refusals(["--port", "9000"]) == [
        "--port is set by the config's own fields (--port); use those fields instead"
    ]
    assert vllm_refusals(["--port", "9000"], ["--port"]) != []


# ---- a member's flags and their bounds ------------------------------------------------------------------------

GOOD = [
    ["--gpu-memory-utilization", "0.9"],
    ["--gpu-memory-utilization=0.05"],
    ["--max-model-len", "8192"],
    ["--max-num-seqs", "256"],
    ["--max-num-batched-tokens", "8192"],
    ["--enable-chunked-prefill"],
    ["--no-enable-chunked-prefill"],
    ["--enable-prefix-caching"],
    ["--no-enable-prefix-caching"],
    ["--block-size", "16"],
    ["--kv-cache-dtype", "fp8_e4m3"],
    ["--swap-space", "0"],
    ["--enforce-eager"],
    ["--optimization-level", "3"],
    ["--cuda-graph-sizes", "512"],
    ["--max-cudagraph-capture-size", "256"],
    ["--dtype", "bfloat16"],
    ["--quantization", "awq_marlin"],
    ["--seed", "0"],
    ["--per-request-spec-decode-metrics", "detailed"],
    ["--pipeline-parallel-size", "2"],
    ["--data-parallel-size", "4"],
    ["--enable-expert-parallel"],
    ["--disable-log-requests"],
    ["--enable-log-requests"],
    ["--uvicorn-log-level", "warning"],
    ["--max-logprobs", "20"],
    ["--reasoning-parser", "deepseek_r1"],
    ["--generation-config", "vllm"],
]


@pytest.mark.parametrize("args", GOOD, ids=lambda a: a[0])
def test_it_takes_what_tunes_a_vllm_server(args):
    assert vllm_refusals(args) == []
    assert extra_args_refusals(args, BOTH_MANAGED, engine="vllm") == []  # every engine's managed flags together


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["--gpu-memory-utilization", "1"], "--gpu-memory-utilization takes a number from 0.05 to 0.99, not '1'"),
        (["--gpu-memory-utilization", "nan"], "--gpu-memory-utilization takes a number from 0.05 to 0.99, not 'nan'"),
        (["--max-model-len", "32k"], "--max-model-len takes a whole number from 1 to 10000000, not '32k'"),
        (["--max-model-len", "0"], "--max-model-len takes a whole number from 1 to 10000000, not '0'"),
        (["--max-num-seqs", "5000"], "--max-num-seqs takes a whole number from 1 to 4096, not '5000'"),
        (["--block-size", "24"], "--block-size takes one of 1, 8, 16, 32, 64, 128, not '24'"),
        (["--swap-space", "64"], "--swap-space takes a number from 0 to 8, not '64'"),
        (["--optimization-level", "4"], "--optimization-level takes one of 0, 1, 2, 3, not '4'"),
        (["--seed", "-1"], "--seed takes a whole number from 0 to 2147483647, not '-1'"),
        (["--pipeline-parallel-size", "65"], "--pipeline-parallel-size takes a whole number from 1 to 64, not '65'"),
        (["--per-request-spec-decode-metrics", "all"], "--per-request-spec-decode-metrics takes one of none, summary"),
        (["--generation-config", "/etc"], "--generation-config takes one of auto, vllm, not '/etc'"),
        (["--dtype", "bf16"], "--dtype takes one of auto, half"),
        (["--kv-cache-dtype", "fp4"], "--kv-cache-dtype takes one of auto, fp8"),
        (["--tokenizer-mode", "custom"], "--tokenizer-mode takes one of auto, slow, mistral, not 'custom'"),
        (["--enforce-eager=1"], "--enforce-eager is a switch and takes no value"),
        (["--max-model-len"], "--max-model-len needs a value: a whole number from 1 to 10000000"),
    ],
)
def test_it_holds_each_flag_to_its_bounds(args, refusal):
    problems = vllm_refusals(args)

    assert len(problems) == 1 and problems[0].startswith(refusal), problems


@pytest.mark.parametrize("method", ["torchao", "gguf", "fp4", "AWQ"])
def test_it_takes_only_the_quantization_methods_that_need_nothing_but_the_checkpoint(method):
    assert vllm_refusals(["--quantization", method]) != []


def test_every_listed_flag_is_canonical_and_none_abbreviates_a_managed_one():
    for flag, rule in FLAG_RULES.items():
        needs = [f"{flag} needs a value: {rule.text}"] if rule.takes_value else []
        assert vllm_refusals([flag]) == needs
        assert extra_args_refusals([flag], BOTH_MANAGED, engine="vllm") == needs
    listed = {*FLAG_RULES, *HOST_FLAG_RULES}
    assert not [(f, m) for f in listed for m in BOTH_MANAGED if m != f and m.startswith(f)]
    assert not listed & {*NEVER_FLAGS, *MANAGED}
    assert not FLAG_RULES.keys() & HOST_FLAG_RULES.keys()
    assert all(target.startswith("--") for target in SHORT_FLAGS.values())


# ---- spellings vLLM's parser reads as a flag ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (
            ["--speculative-config.method", "eagle3"],
            "--speculative-config.method sets a key of --speculative-config (vLLM's dotted form); --speculative-config "
            "is set by the config's own fields (--speculative-config); use those fields instead",
        ),
        (
            ["--speculative_config.num_speculative_tokens=5"],
            "--speculative_config.num_speculative_tokens sets a key of --speculative-config (vLLM's dotted form); "
            "--speculative-config is set by the config's own fields",
        ),
        (["-sc.model", "/tmp/evil"], "-sc.model sets a key of --speculative-config (vLLM's dotted form); "),
        (["--speculative_config", "{}"], "--speculative_config is an underscore spelling of --speculative-config"),
        (["-sc", '{"method": "ngram"}'], "-sc is set by the config's own fields (-sc); use those fields instead"),
        (["-tp", "8"], "-tp is set by the config's own fields (-tp)"),
        (["--spec-method", "ngram"], "--spec-method is set by the config's own fields (--spec-method)"),
        (["--spec-model", "/tmp/evil"], "--spec-model is set by the config's own fields (--spec-model)"),
        (["--spec-tokens=9"], "--spec-tokens is set by the config's own fields (--spec-tokens)"),
        (["--tensor_parallel_size", "8"], "--tensor_parallel_size is an underscore spelling of --tensor-parallel-size"),
        (
            ["--max_model_len", "8192"],
            "--max_model_len is an underscore spelling of --max-model-len, which vLLM reads as that flag: write the "
            "flag in full (--max-model-len)",
        ),
        (
            ["--trust_remote_code"],
            "--trust_remote_code is an underscore spelling of --trust-remote-code, which vLLM reads as that flag; "
            "--trust-remote-code is never settable in a config: it loads code into the server",
        ),
        (["--hf-overrides.architectures", "X"], "; --hf-overrides is never settable in a config: it loads code"),
        (["--compilation-config.backend=evil.mod.fn"], "; --compilation-config is never settable in a config"),
        (["-cc", '{"backend": "evil.mod.fn"}'], "-cc is vLLM's short form of --compilation-config; --compilation-"),
        (["-cc.mode=3"], "-cc.mode sets a key of --compilation-config (vLLM's dotted form); --compilation-config is n"),
        (["-O3"], "-O3 is vLLM's short form of --optimization-level: write the flag in full (--optimization-level)"),
        (["-O", "3"], "-O is vLLM's short form of --optimization-level: write the flag in full"),
        (["-q", "awq"], "-q is vLLM's short form of --quantization: write the flag in full (--quantization)"),
        (["-asc", "4"], "-asc is vLLM's short form of --api-server-count; --api-server-count is not allowed on this h"),
        (["--max-model-len.x", "1"], "--max-model-len.x sets a key of --max-model-len (vLLM's dotted form): write --m"),
        (["--max-model", "8192"], "--max-model is an abbreviation: write the flag in full (--max-model-len)"),
        (["--Max-Model-Len", "8192"], "'--Max-Model-Len' is not a flag's canonical spelling"),
        (["-x"], "'-x' is not a flag's canonical spelling"),
        (["\u2014trust-remote-code"], "is not a flag's canonical spelling"),
    ],
)
def test_it_refuses_every_other_spelling_and_says_what_it_stands_for(args, refusal):
    problems = vllm_refusals(args)

    assert len(problems) == 1 and refusal in problems[0], problems


_DASHES = st.sampled_from(["--", "-", "\u2013", "\u2212\u2212"])
_WORDS = st.from_regex(r"[A-Za-z0-9_]{1,12}(-[A-Za-z0-9_]{1,12}){0,4}(\.[a-z_]{1,12})?", fullmatch=True)
_LISTED = st.sampled_from(sorted({*FLAG_RULES, *HOST_FLAG_RULES, *NEVER_FLAGS}))
_FLAG = st.one_of(
    st.builds(lambda d, w: d + w, _DASHES, _WORDS),
    _LISTED,
    st.sampled_from(sorted(SHORT_FLAGS)),
    st.builds(lambda f: f[:-1], _LISTED),
    st.builds(lambda f: "--" + f[2:].replace("-", "_"), _LISTED),
    st.builds(lambda f, k: f"{f}.{k}", _LISTED, st.sampled_from(["method", "level", "backend", "x"])),
)
_HOST_FLAGS = st.lists(st.sampled_from(sorted({*HOST_FLAG_RULES, *launch_flags.HOST_FLAG_RULES, *NEVER_FLAGS})))


@settings(max_examples=300, deadline=None)
@given(flag=_FLAG, value=st.sampled_from([[], ["1"], ["0.5"], ["auto"], ["/etc/passwd"]]), host_flags=_HOST_FLAGS)
def test_it_accepts_no_flag_outside_the_vllm_lists_however_it_is_spelled(flag, value, host_flags):
    accepted = vllm_refusals([flag, *value], host_flags) == []

    if accepted:
        assert flag in FLAG_RULES or (flag in HOST_FLAG_RULES and flag in host_flags), (flag, host_flags)


# ---- the attack: a value that carries a flag ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (
            ["--max-model-len=1 --trust-remote-code"],
            "--max-model-len takes a whole number from 1 to 10000000, not '1 --trust-remote-code'",
        ),
        (["--max-model-len", "1 --trust-remote-code"], "--max-model-len takes a whole number"),
        (["--chat-template=/etc/passwd"], "--chat-template is never settable in a config: it reads or writes files"),
        (["--dtype", "--trust-remote-code"], "--dtype takes one of auto, half, float16"),
        (["--enforce-eager=--trust-remote-code"], "--enforce-eager is a switch and takes no value"),
        (["--reasoning-parser", "deepseek_r1 --api-key=x"], "--reasoning-parser takes one of"),
        (["--generation-config=/root/.ssh"], "--generation-config takes one of auto, vllm, not '/root/.ssh'"),
    ],
)
def test_a_value_that_carries_a_flag_is_judged_as_the_value_it_is(args, refusal):
    problems = vllm_refusals(args)

    assert problems and problems[0].startswith(refusal), problems


def test_a_refused_flag_is_refused_wherever_it_sits_among_good_ones():
    args = ["--max-model-len", "8192", "--tokenizer", "/tmp/evil", "--enforce-eager", "--load-format=tensorizer"]

    assert vllm_refusals(args) == [
        "--tokenizer is never settable in a config: it reads or writes files wherever it says (no host may allow it)",
        "--load-format is never settable in a config: it loads code into the server (no host may allow it)",
    ]


# ---- a host's flags -------------------------------------------------------------------------------------------


def test_a_hosts_flag_needs_the_hosts_allowance_and_keeps_its_bounds():
    assert vllm_refusals(["--api-server-count", "4"]) == [
        "--api-server-count is not allowed on this host: it is not on the list of flags a member may set "
        "(an admin can allow it for the host, with the host's extra flags)"
    ]
    assert vllm_refusals(["--api-server-count", "4"], ["--api-server-count"]) == []
    assert vllm_refusals(["--api-server-count", "17"], ["--api-server-count"]) == [
        "--api-server-count takes a whole number from 1 to 16, not '17'"
    ]
    for flag, rule in HOST_FLAG_RULES.items():
        assert host_flag_refusal(flag, "vllm") is None
        assert vllm_refusals([flag], [flag]) == ([f"{flag} needs a value: {rule.text}"] if rule.takes_value else [])


def test_a_host_allowance_opens_only_its_own_engines_flag():
    allowed = ["--api-server-count", "--tokenizer-worker-num"]  # one host, both engines' allowances

    assert vllm_refusals(["--tokenizer-worker-num", "4"], allowed) != []
    assert extra_args_refusals(["--api-server-count", "4"], (), allowed) != []  # an SGLang config
    assert "--api-server-count" not in flag_rules(allowed) and "--api-server-count" in flag_rules(allowed, "vllm")


def test_an_admin_may_allow_a_flag_of_either_engine_for_a_host():
    assert host_flag_refusal("--api-server-count") is not None  # SGLang's list, as before
    assert host_flag_refusal("--api-server-count", "vllm") is None
    assert host_flag_refusal_any_engine("--api-server-count") is None
    assert host_flag_refusal_any_engine("--tokenizer-worker-num") is None
    assert host_flag_refusal_any_engine("--hf-overrides") == (
        "--hf-overrides loads code into the server: no host may allow it"
    )
    assert host_flag_refusal_any_engine("--max-num-seqs") == (
        "--max-num-seqs is a member's to set already: a host need not allow it"
    )
    assert MAX_HOST_FLAGS >= len(HOST_FLAG_RULES) + len(launch_flags.HOST_FLAG_RULES) - 1


# ---- engine-awareness, and SGLang as it was -------------------------------------------------------------------


def test_an_engine_specdash_does_not_drive_is_refused_by_name():
    refusal = "engine must be one of sglang, vllm, not 'tgi'"

    assert engine_refusal("tgi") == refusal and engine_refusal(None) is None and engine_refusal("") is None
    assert extra_args_refusals(["--enforce-eager"], engine="tgi") == [refusal]
    assert launch_refusals({"model_path": "/m"}, engine="tgi") == [refusal]
    assert host_flag_refusal("--api-server-count", "tgi") == refusal
    with pytest.raises(ValueError, match="engine must be one of sglang, vllm"):
        flag_rules((), "tgi")


# SGLang's refusals from its own tests and its lists, in every kind: none may change with the engine argument.
_SGLANG_CASES = [
    ["--config", "x.yaml"],
    ["--trust-remote-code"],
    ["--trust_remote_code"],
    ["--tp", "4"],
    ["--port=1"],
    ["--mem-fraction", "0.8"],
    ["--mem-fraction-static", "0.85"],
    ["--tokenizer-worker-num", "4"],
    ["--speculative-adaptive-c", "/tmp/x"],
    ["-tp", "2"],
    ["-O3"],
    ["--speculative-config.method", "x"],
    ["--enforce-eager"],
    ["--gpu-memory-utilization", "0.9"],
    ["0.85"],
    *([flag] for flag in sorted({*launch_flags.FLAG_RULES, *launch_flags.HOST_FLAG_RULES, *launch_flags.NEVER_FLAGS})),
]


@pytest.mark.parametrize("args", _SGLANG_CASES, ids=lambda a: a[0])
def test_a_config_that_names_no_engine_is_judged_as_sglang(args):
    for managed in (["--tp-size", "--tp", "--port"], BOTH_MANAGED):
        plain = extra_args_refusals(args, managed, ["--enable-mscclpp"])

        assert extra_args_refusals(args, managed, ["--enable-mscclpp"], "sglang") == plain
        assert extra_args_refusals(args, managed, ["--enable-mscclpp"], None) == plain
    for flag in args[:1]:
        assert host_flag_refusal(flag) == host_flag_refusal(flag, "sglang")


def test_each_engine_refuses_the_others_flags():
    assert extra_args_refusals(["--gpu-memory-utilization", "0.9"]) == [
        "--gpu-memory-utilization is not allowed: it is not on the list of flags a member may set "
        "(an admin can allow it for a host, in the host's launcher)"
    ]
    assert vllm_refusals(["--mem-fraction-static", "0.8"]) == [
        "--mem-fraction-static is not allowed: it is not on the list of flags a member may set "
        "(an admin can allow it for a host, in the host's launcher)"
    ]
    assert FLAGS_BY_ENGINE["vllm"].label == "vLLM" and FLAGS_BY_ENGINE["sglang"].label == "SGLang"


def test_a_whole_vllm_launch_spec_is_judged_by_vllms_lists_and_named_as_vllm():
    spec = {
        "model_path": "-O3",
        "tp_size": 2,
        "env": {"VLLM_PLUGINS": "evil", "VLLM_LOG_STATS_INTERVAL": "5"},
        "extra_args": ["--max-model-len", "8192", "--trust-remote-code"],
    }

    problems = launch_refusals(spec, (), MANAGED, (), engine="vllm")

    assert problems[0] == "model_path must not start with - or @ (vLLM would read it as a flag)"
    assert [p.split(":")[0].split(" ")[0] for p in problems[1:]] == ["VLLM_PLUGINS", "--trust-remote-code"]
    fixed = {**spec, "model_path": "/m", "env": {"VLLM_LOG_STATS_INTERVAL": "5"}, "extra_args": ["--enforce-eager"]}
    assert launch_refusals(fixed, (), MANAGED, (), engine="vllm") == []
    assert launch_refusals({"model_path": "-x"})[0].endswith("(SGLang would read it as a flag)")


# ---- vLLM's variables -----------------------------------------------------------------------------------------

GOOD_ENV = {
    "VLLM_LOG_STATS_INTERVAL": "2.5",
    "VLLM_LOGGING_LEVEL": "debug",
    "VLLM_ATTENTION_BACKEND": "FLASHINFER",
    "VLLM_USE_V1": "1",
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1",
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "0",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_ENGINE_READY_TIMEOUT_S": "1200",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
}


def test_it_takes_vllms_switches_and_every_listed_one_is_in_the_group():
    assert env_refusals(GOOD_ENV) == []
    assert set(GOOD_ENV) <= set(ENV_GROUPS["vLLM switches"])
    assert all(name.startswith("VLLM_") for name in ENV_GROUPS["vLLM switches"])


@pytest.mark.parametrize(
    ("name", "value", "refusal"),
    [
        ("VLLM_USE_V1", "true", "VLLM_USE_V1 takes one of 0, 1, not 'true'"),
        ("VLLM_LOGGING_LEVEL", "WARNING", "VLLM_LOGGING_LEVEL takes one of DEBUG, INFO, not 'WARNING'"),
        ("VLLM_LOG_STATS_INTERVAL", "0.1", "VLLM_LOG_STATS_INTERVAL takes a number from 1 to 60, not '0.1'"),
        ("VLLM_LOG_STATS_INTERVAL", "inf", "VLLM_LOG_STATS_INTERVAL takes a number from 1 to 60, not 'inf'"),
        ("VLLM_WORKER_MULTIPROC_METHOD", "forkserver", "VLLM_WORKER_MULTIPROC_METHOD takes one of spawn, fork"),
        ("VLLM_ATTENTION_BACKEND", "evil.module", "VLLM_ATTENTION_BACKEND takes one of FLASH_ATTN"),
    ],
)
def test_it_holds_each_vllm_variable_to_its_value_rule(name, value, refusal):
    problems = env_refusals({name: value})

    assert len(problems) == 1 and problems[0].startswith(refusal), problems


NEVER_ENV = [
    "VLLM_PLUGINS",
    "VLLM_CONFIG_ROOT",
    "VLLM_CACHE_ROOT",
    "VLLM_USE_MODELSCOPE",
    "VLLM_RPC_BASE_PATH",
    "VLLM_HOST_IP",
    "VLLM_PORT",
    "VLLM_TORCH_PROFILER_DIR",
    "VLLM_SERVER_DEV_MODE",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
    "VLLM_PROCESS_NAME_PREFIX",
    "VLLM_ALLOW_INSECURE_SERIALIZATION",
    "VLLM_LOGGING_STREAM",
    "VLLM_LOGGING_CONFIG_PATH",
    "VLLM_LOGGING_PREFIX",
    "VLLM_API_KEY",
    "VLLM_ASSETS_CACHE",
    "VLLM_DP_MASTER_IP",
]


@pytest.mark.parametrize("name", NEVER_ENV)
def test_it_refuses_vllms_code_path_network_and_title_variables_whatever_prefix_a_host_adds(name):
    for prefixes in ([], ["VLLM_", "VLLM_SERVER_", "VLL", "SIMHOST_"]):
        refusal = env_name_refusal(name, prefixes)

        assert refusal == (
            f"{name}: not an allowed environment variable: it is not on the list of variables a member may set "
            "(an admin can set it for a host, in the host's shell setup)"
        )
    assert name not in ENV_RULES


@pytest.mark.parametrize("prefix", ["VLLM_", "VLL", "VLLM_SERVER_", "VLLM_LOG"])
def test_a_host_may_not_open_vllms_namespace(prefix):
    assert prefix_refusal(prefix) == (
        f"{prefix}: overlaps the variables of SGLang, vLLM or their libraries, which are allowed one by one"
    )
