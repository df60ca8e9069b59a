"""The launch policy (pure): which environment variables and extra flags a config may give a server, and the shape
and bounds of its values. The forms and the worker both apply it; these tests pin the rules themselves."""

from __future__ import annotations

import pytest

from experiments.rules.launch_policy import (
    ALLOWED_ENV_PREFIXES,
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
]

SERVING = [
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
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
    "GLOO_SOCKET_IFNAME",
    "UCX_TLS",
    "MC_TE_METRIC",
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


def test_it_names_the_rule_and_the_allowed_prefixes():
    refusal = env_name_refusal("SIMHOST_FAULTS")

    assert refusal is not None
    assert refusal.startswith("SIMHOST_FAULTS: not an allowed environment variable: names must start with one of")
    assert all(prefix in refusal for prefix in ALLOWED_ENV_PREFIXES)
    assert "an admin can allow more prefixes for a host" in refusal


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
    assert env_refusals({"NCCL_X": "a" * MAX_ENV_VALUE_LENGTH}) == []
    assert env_refusals({"NCCL_X": "a" * (MAX_ENV_VALUE_LENGTH + 1)}) == [
        f"The value of NCCL_X is longer than {MAX_ENV_VALUE_LENGTH} characters"
    ]
    assert env_refusals({"NCCL_X": "a\x00b"}) == ["The value of NCCL_X must not contain control characters or newlines"]
    assert env_refusals({"NCCL_X": ["a"]}) == ["The value of NCCL_X must be a string"]
    assert env_refusals({"N" * 200: "1"})[0].endswith("is not a valid environment variable name")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--config", "x.yaml"], "--config is not allowed: --config reads more arguments"),
        (["--conf=x.yaml"], "--conf is not allowed: --config"),  # argparse would expand the abbreviation
        (["--custom-weight-loader", "os.system"], "imports and calls Python functions"),
        (["--enable-custom-logit-processor"], "serialized Python callable"),
        (["--tokenizer-p", "evil/repo"], "--tokenizer-p is not allowed: --tokenizer-path"),
        (["--speculative-token-map", "x.pt"], "torch.load"),
        (["--some-future-plugin", "x"], "names a file, directory or code"),
        (["--weights-dir", "/x"], "names a file, directory or code"),
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
    args = ["--mem-fraction-static", "0.85", "--cuda-graph-max-bs=8", "--trust-remote-code", "--context-length", "8"]

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
