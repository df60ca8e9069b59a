"""The launch policy (pure): which environment variables and extra flags a config may give a server, and the shape
and bounds of its values. The forms and the worker both apply it; these tests pin the rules themselves."""

from __future__ import annotations

import pytest

from experiments.rules.launch_policy import (
    MAX_ENV_VALUE_LENGTH,
    MAX_ENV_VARS,
    MAX_EXTRA_ARGS,
    env_name_refusal,
    env_refusals,
    extra_args_refusals,
    launch_refusals,
    prefix_refusal,
    text_refusal,
)

# Each of these gives code execution in the server's processes, or loads or writes what it names.
DANGEROUS = [
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "PYTHONWARNINGS",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONBREAKPOINT",
    "PERL5OPT",
    "PERL5LIB",
    "BROWSER",
    "BASH_ENV",
    "ENV",
    "PATH",
    "HOME",
    "PROMPT_COMMAND",
    "GLIBC_TUNABLES",
    "NODE_OPTIONS",
    "JAVA_TOOL_OPTIONS",
    "PYTHONUNBUFFERED",
    # Within allowed prefixes: loaders, config files, caches of binaries, files written.
    "NCCL_NET_PLUGIN",
    "NCCL_TUNER_PLUGIN",
    "NCCL_PROFILER_PLUGIN",
    "NCCL_ENV_PLUGIN",
    "NCCL_CONF_FILE",
    "NCCL_DEBUG_FILE",
    "NCCL_TOPO_FILE",
    "CUDA_INJECTION64_PATH",
    "CUDA_HOME",
    "OMP_TOOL_LIBRARIES",
    "SGLANG_LOGGING_CONFIG_PATH",
    "SGLANG_EXTERNAL_MODEL_PACKAGE",
    "TORCH_EXTENSIONS_DIR",
    "TORCH_LOGS_OUT",
    "TRITON_CACHE_DIR",
    "TRITON_CACHE_MANAGER",
    "TRITON_PTXAS_PATH",
    "FLASHINFER_WORKSPACE_BASE",
    "FLASHINFER_EXTRA_LDFLAGS",
    "HF_HOME",
    "HF_MODULES_CACHE",
    "HF_TOKEN_PATH",
    "UCX_MODULE_DIR",
    # Listening or connecting out: not on the list.
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "UCX_TLS",
    "MC_TE_METRIC",
    "HF_ENDPOINT",
]

SERVING = [
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_IB_HCA",
    "NCCL_DEBUG",
    "SGLANG_ENABLE_SPEC_V2",
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "TORCH_CUDA_ARCH_LIST",
    "TORCH_NCCL_BLOCKING_WAIT",
    "PYTORCH_CUDA_ALLOC_CONF",
    "NVIDIA_TF32_OVERRIDE",
    "OMP_NUM_THREADS",
    "HF_HUB_OFFLINE",
    "HF_TOKEN",
    "TRITON_PRINT_AUTOTUNING",
    "FLASHINFER_LOGLEVEL",
    "TOKENIZERS_PARALLELISM",
    "EAGLE3_PROFILE",
]


@pytest.mark.parametrize("name", DANGEROUS)
def test_it_refuses_loader_interpreter_and_path_variables(name):
    refusal = env_name_refusal(name)

    assert refusal is not None and refusal.startswith(f"{name}: not an allowed environment variable")


@pytest.mark.parametrize("name", DANGEROUS)
def test_it_refuses_them_whatever_prefix_a_host_adds(name):
    assert env_name_refusal(name, [name[:3], name.split("_")[0] + "_", "SIMHOST_"]) is not None


@pytest.mark.parametrize("name", SERVING)
def test_it_allows_what_serving_sets(name):
    assert env_name_refusal(name) is None


def test_it_names_the_variable_and_who_can_allow_it():
    refusal = env_name_refusal("SIMHOST_FAULTS")
    engine = env_name_refusal("NCCL_RAS_ADDR")

    assert refusal == (
        "SIMHOST_FAULTS: not an allowed environment variable: it is not on the list of variables a member may set "
        "(an admin can allow it for a host, with the host's extra variable prefixes)"
    )
    assert engine is not None and engine.endswith("(an admin can set it for a host, in the host's shell setup)")


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"HF_HUB_OFFLINE": "0"}, "HF_HUB_OFFLINE takes one of 1"),
        ({"NCCL_PROTO": "LL;Simple"}, "NCCL_PROTO takes a comma-separated list of LL, LL128, Simple"),
        ({"CUDA_VISIBLE_DEVICES": "0,1 "}, "CUDA_VISIBLE_DEVICES takes a comma-separated list of GPU indexes"),
        ({"OMP_NUM_THREADS": "1_000"}, "OMP_NUM_THREADS takes a whole number from 1 to 1024"),
        ({"SGLANG_ENABLE_SPEC_V2": "maybe"}, "SGLANG_ENABLE_SPEC_V2 takes one of 0, 1, true"),
    ],
)
def test_it_holds_each_listed_variable_to_its_value_rule(env, fragment):
    assert any(fragment in p for p in env_refusals(env)), env_refusals(env)


def test_it_allows_a_hosts_extra_prefixes_and_ignores_empty_ones():
    assert env_name_refusal("SIMHOST_FAULTS", ["SIMHOST_"]) is None
    assert env_name_refusal("SIMHOST_STATE_DIR", ["SIMHOST_"]) is not None  # a path stays the admin's
    assert env_name_refusal("MYLAB_X", ["", "1BAD"]) is not None


def test_it_refuses_a_host_prefix_that_would_open_never_allowed_names():
    assert prefix_refusal("LD_") is not None
    assert prefix_refusal("PYTHON_") is not None
    assert prefix_refusal("BASH_") is not None
    assert prefix_refusal("SIMHOST_") is None
    assert prefix_refusal("MYLAB_") is None


def test_it_bounds_the_environment():
    too_many = {f"NCCL_X{i}": "1" for i in range(MAX_ENV_VARS + 1)}

    assert env_refusals(too_many) == [f"At most {MAX_ENV_VARS} environment variables"]
    assert env_refusals({"HF_TOKEN": "a" * MAX_ENV_VALUE_LENGTH}) == []
    assert env_refusals({"HF_TOKEN": "a" * (MAX_ENV_VALUE_LENGTH + 1)}) == [
        f"The value of HF_TOKEN is longer than {MAX_ENV_VALUE_LENGTH} characters"
    ]
    for separator in ("\x00", "\n", "\x85", "\u2028", "\u2029"):
        assert env_refusals({"HF_TOKEN": f"a{separator}b"}) == [
            "The value of HF_TOKEN must not contain control characters, newlines or line separators"
        ]
    assert env_refusals({"HF_TOKEN": ["a"]}) == ["The value of HF_TOKEN must be a string"]
    assert env_refusals({"N" * 200: "1"})[0].endswith("is not a valid environment variable name")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--config", "x.yaml"], "--config is never settable in a config: it reads or writes files"),
        (["--conf=x.yaml"], "--conf is not allowed"),
        (["--custom-weight-loader", "os.system"], "--custom-weight-loader is never settable in a config"),
        (["--enable-custom-logit-processor"], "--enable-custom-logit-processor is never settable"),
        (["--tokenizer-p", "evil/repo"], "--tokenizer-p is not allowed"),
        (["--speculative-token-map", "x.pt"], "--speculative-token-map is never settable"),
        (["--some-future-plugin", "x"], "an admin can allow it for a host, in the host's launcher"),
        (["--trust-remote-code"], "(no host may allow it)"),
        (["--tokenizer-worker-num", "4"], "an admin can allow it for the host, with the host's extra flags"),
        (["--mem-fraction", "0.8"], "--mem-fraction is an abbreviation: write the flag in full"),
        (["--mem-fraction-static", "0.8x"], "--mem-fraction-static takes a number from 0.05 to 0.99"),
        (["--cuda-graph-max-bs", "1e3"], "--cuda-graph-max-bs takes a whole number from 1 to 4096"),
        (["--enable-metrics=1"], "--enable-metrics is a switch and takes no value"),
        (["--enable-metrics", "1"], "'1' follows a flag that takes no value"),
        (["--context-length"], "--context-length needs a value"),
        (["--trust_remote_code"], "not a flag's canonical spelling"),
        (["--tp", "4"], "--tp is set by the config's own fields"),
        (["--port=1"], "--port is set by the config's own fields"),
        (["@args.txt"], "may not start with @"),
        (["0.85"], "must start with a flag"),
        (["--x", "a\nb"], "control characters"),
        (["--x", "a" * 1025], "longer than 1024"),
    ],
)
def test_it_refuses_flags_that_load_code_or_files_or_override_a_field(args, fragment):
    problems = extra_args_refusals(args, ["--tp-size", "--port"])

    assert any(fragment in p for p in problems), problems


def test_it_allows_tuning_flags_and_bounds_their_count():
    args = ["--mem-fraction-static", "0.85", "--cuda-graph-max-bs=8", "--enable-metrics", "--context-length", "8"]

    assert extra_args_refusals(args, ["--tp-size"]) == []
    assert extra_args_refusals(["--x"] * (MAX_EXTRA_ARGS + 1)) == [f"At most {MAX_EXTRA_ARGS} extra arguments"]


@pytest.mark.parametrize("value", ["--config=/tmp/x", "-h", "@file", "a\nb", "a\x00b", "x" * 513])
def test_it_refuses_a_path_that_would_read_as_a_flag_or_is_not_one_word(value):
    assert text_refusal("The model path", value, 512) is not None


def test_it_accepts_paths_with_shell_metacharacters_as_one_literal_word():
    assert text_refusal("The model path", "/models/$(touch x); `id` 'q' \"d\" & | *", 512) is None


def test_it_checks_a_whole_launch_spec():
    spec = {
        "model_path": "-x",
        "served_model_name": "",
        "speculative_draft_model_path": "",
        "speculative_num_steps": 17,
        "speculative_eagle_topk": 0,
        "speculative_num_draft_tokens": 3,
        "tp_size": 65,
        "env": {"LD_PRELOAD": "/tmp/x.so", "SIMHOST_FAULTS": "zombie"},
        "extra_args": ["--config", "x"],
    }

    problems = launch_refusals(spec, ["SIMHOST_"], ["--tp-size"])

    assert [p.split(":")[0].split(" ")[0] for p in problems] == [
        "model_path",
        "tp_size",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "LD_PRELOAD",
        "--config",
    ]
    fixed = {"model_path": "/m", "tp_size": 8, "speculative_num_steps": 2, "speculative_eagle_topk": 1}
    assert launch_refusals({**spec, **fixed, "env": {"SIMHOST_FAULTS": "zombie"}, "extra_args": []}, ["SIMHOST_"]) == []
