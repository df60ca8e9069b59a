"""What a user may put into a server's launch on a GPU host: environment variable names, extra SGLang flags, the
shape of paths and names, and the bounds of every value. Pure (no Django): the config form refuses what breaks
these rules with a field error, and the worker checks them again before it launches anything (defence in depth:
a config stored before a rule existed, or written around the forms, still never reaches a host).

Every value is passed to the host's shell as one quoted word (`workers.ssh.quote_command`), so no value can run a
command by itself. What these rules stop is a value that is *meant* to make the server's processes run code or
touch files: an environment variable the dynamic loader, the Python interpreter or a library reads as "load this",
and SGLang flags that import, unpickle or fetch code, or read and write files wherever they say.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
# Control characters (tab aside) have no place in a path, a flag or an env value, and make logs and commands lie.
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

# ---- environment variables --------------------------------------------------------------------------------------

# The name prefixes serving uses, each with why it is here. A host's `extra_env_prefixes` (set by an admin) adds
# more for that host, such as SIMHOST_ for the simulated host's fault knobs.
ALLOWED_ENV_PREFIXES: dict[str, str] = {
    "NCCL_": "NCCL's protocol, algorithm, buffer and network-interface tuning between the GPUs",
    "SGLANG_": "SGLang's own switches (SGLANG_ENABLE_SPEC_V2, SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN, ...)",
    "CUDA_": "device selection and runtime behaviour (CUDA_VISIBLE_DEVICES, CUDA_LAUNCH_BLOCKING, ...)",
    "TORCH_": "the PyTorch runtime and its NCCL process groups (TORCH_NCCL_*, TORCH_CUDA_ARCH_LIST, TORCH_LOGS)",
    "PYTORCH_": "PyTorch's CUDA allocator (PYTORCH_CUDA_ALLOC_CONF) and device checks",
    "NVIDIA_": "the container runtime's device selection and NVIDIA_TF32_OVERRIDE",
    "OMP_": "the OpenMP thread count of the CPU-side work (OMP_NUM_THREADS)",
    "HF_": "Hugging Face hub switches (HF_HUB_OFFLINE, HF_TOKEN, HF_HUB_ENABLE_HF_TRANSFER)",
    "TRITON_": "Triton kernel compilation and autotuning switches",
    "FLASHINFER_": "FlashInfer kernel selection switches",
    "GLOO_": "the CPU process group's network interface (GLOO_SOCKET_IFNAME)",
    "UCX_": "UCX transport selection (KV transfer between servers)",
    "MC_": "the Mooncake transfer engine (KV transfer between servers)",
    "TOKENIZERS_": "the tokenizers library's parallelism (TOKENIZERS_PARALLELISM)",
}
# Single names outside those prefixes. EAGLE3_PROFILE: the timing lines the explanatory model reads (a patched
# server prints them; the comparison page tells users to set it).
ALLOWED_ENV_NAMES: dict[str, str] = {
    "EAGLE3_PROFILE": "one `EAGLE3 profile:` timing line per verify step",
    "EAGLE3_PROFILE_EVERY": "print every Nth verify step only",
}

# Never allowed, whatever prefix a host adds: what the dynamic loader, an interpreter or a shell reads as code or as
# where to find code. Each gives code execution in the server's processes on its own (LD_PRELOAD loads a library,
# PYTHONWARNINGS imports a module, PERL5OPT/BASH_ENV/BROWSER run commands, PYTHONPATH/PATH pick what runs).
NEVER_ENV_PREFIXES = (
    "LD_",
    "DYLD_",
    "GCONV_",
    "GLIBC_",
    "MALLOC_",
    "PYTHON",
    "PERL",
    "RUBY",
    "NODE_",
    "JAVA_",
    "_JAVA_",
    "BASH_",
    "SSH_",
    "GIT_",
)
NEVER_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "SHELL",
        "ENV",
        "IFS",
        "PS4",
        "PROMPT_COMMAND",
        "SHELLOPTS",
        "BASHOPTS",
        "BROWSER",
        "EDITOR",
        "VISUAL",
        "PAGER",
        "LESSOPEN",
        "LESSCLOSE",
        "TMPDIR",
        "HOSTALIASES",
        "LOCPATH",
        "NLSPATH",
        "TERMINFO",
        "PYTHONUNBUFFERED",  # specdash sets it itself (the server's access lines must not be buffered)
    }
)

# Refused within every allowed prefix, host extras included. Names that point a process at a file, a directory or
# a library are the host's layout, not an experiment's: they load a plugin or a shared library (NCCL_NET_PLUGIN,
# NCCL_TUNER_PLUGIN, NCCL_PROFILER_PLUGIN, NCCL_ENV_PLUGIN, CUDA_INJECTION64_PATH, OMP_TOOL_LIBRARIES), read a file
# as configuration (NCCL_CONF_FILE sets any variable; SGLANG_LOGGING_CONFIG_PATH is a dictConfig that can name
# callables), pick the compiler or the cache whose binaries get loaded (CUDA_HOME, TRITON_CACHE_DIR,
# TORCH_EXTENSIONS_DIR, HF_MODULES_CACHE), or write wherever they say (NCCL_DEBUG_FILE, TORCH_LOGS_OUT). An admin
# who needs one sets it in the host's shell setup.
DENIED_ENV_NAME_PARTS = ("PLUGIN", "INJECTION", "PRELOAD", "LIBRAR", "FLAGS", "PACKAGE")
DENIED_ENV_NAME_SUFFIXES = (
    "_PATH",
    "_PATHS",
    "_FILE",
    "_FILES",
    "_FILENAME",
    "_DIR",
    "_DIRS",
    "_HOME",
    "_ROOT",
)
DENIED_ENV_NAMES: dict[str, str] = {
    "TRITON_CACHE_MANAGER": "imports a class by its module path",
    "TRITON_REMOTE_CACHE_BACKEND": "imports a class by its module path",
    "FLASHINFER_WORKSPACE_BASE": "where FlashInfer builds and then loads its JIT libraries",
    "OMP_TOOL_VERBOSE_INIT": "writes to the file it names",
    "TORCH_LOGS_OUT": "writes to the file it names",
    "HF_HUB_CACHE": "where downloaded model code is found and then run (with --trust-remote-code)",
    "HF_MODULES_CACHE": "a directory whose Python modules are imported",
}
# *_FLAGS: compiler and linker flags of JIT builds (-fplugin=, -B, -Wl,...) run code; *_PACKAGE: SGLang imports the
# named Python package (SGLANG_EXTERNAL_MODEL_PACKAGE).

# Values of such names (HF_TOKEN, ...) are shown as SECRET_MASK on pages and in the API: every member reads them.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|ACCESS_KEY|PRIVATE", re.IGNORECASE)
SECRET_MASK = "(hidden)"


def masked(env: Mapping[str, Any]) -> dict[str, str]:
    """`env` to show: values of secret-looking names replaced by SECRET_MASK."""
    return {str(name): SECRET_MASK if SECRET_NAME.search(str(name)) else str(value) for name, value in env.items()}


def is_launch_variable(name: str, extra_prefixes: Iterable[str] = ()) -> bool:
    """Whether `name` is a variable a launch may set on a host with `extra_prefixes` (what the effective environment
    of a server shows: the rest of a process's environment is the login's, not the experiment's)."""
    extra = tuple(p for p in extra_prefixes if isinstance(p, str) and ENV_NAME.match(p))
    return name in ALLOWED_ENV_NAMES or name.startswith((*ALLOWED_ENV_PREFIXES, *extra))


MAX_ENV_VARS = 64
MAX_ENV_NAME_LENGTH = 128
MAX_ENV_VALUE_LENGTH = 4096  # a long NCCL_IB_HCA list is ~200 characters; a token is ~100


def _denied_within_prefix(name: str) -> str | None:
    if name in DENIED_ENV_NAMES:
        return DENIED_ENV_NAMES[name]
    if any(part in name for part in DENIED_ENV_NAME_PARTS) or name.endswith(DENIED_ENV_NAME_SUFFIXES):
        return (
            "it names code, a library, a file or a directory for the server's processes to load or write "
            "(an admin sets such variables in the host's shell setup)"
        )
    return None


def env_name_refusal(name: str, extra_prefixes: Iterable[str] = ()) -> str | None:
    """Why `name` may not be set in a config's environment on a host with `extra_prefixes`; None if it may."""
    if not ENV_NAME.match(name) or len(name) > MAX_ENV_NAME_LENGTH:
        return f"{name[:MAX_ENV_NAME_LENGTH]!r} is not a valid environment variable name"
    if name in NEVER_ENV_NAMES or name.startswith(NEVER_ENV_PREFIXES):
        return (
            f"{name}: not an allowed environment variable: the loader, an interpreter or the shell reads it as code "
            "or as where code is (no host may allow it)"
        )
    denied = _denied_within_prefix(name)
    if denied:
        return f"{name}: not an allowed environment variable: {denied}"
    # An empty or odd prefix from a host row must not open everything.
    extra = [p for p in extra_prefixes if isinstance(p, str) and ENV_NAME.match(p)]
    prefixes = (*ALLOWED_ENV_PREFIXES, *extra)
    if name in ALLOWED_ENV_NAMES or name.startswith(tuple(prefixes)):
        return None
    return (
        f"{name}: not an allowed environment variable: names must start with one of {', '.join(prefixes)} "
        "(an admin can allow more prefixes for a host)"
    )


def env_value_refusal(name: str, value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"The value of {name} must be a string"
    text = str(value)
    if len(text) > MAX_ENV_VALUE_LENGTH:
        return f"The value of {name} is longer than {MAX_ENV_VALUE_LENGTH} characters"
    if CONTROL_CHARS.search(text):
        return f"The value of {name} must not contain control characters or newlines"
    return None


def env_refusals(env: Mapping[str, Any], extra_prefixes: Iterable[str] = ()) -> list[str]:
    """Every reason `env` may not be given to a server (empty: it may)."""
    if len(env) > MAX_ENV_VARS:
        return [f"At most {MAX_ENV_VARS} environment variables"]
    extra = tuple(extra_prefixes)
    problems = []
    for name, value in env.items():
        refusal = env_name_refusal(str(name), extra)
        if refusal:
            problems.append(refusal)
        value_refusal = env_value_refusal(str(name), value)
        if value_refusal:
            problems.append(value_refusal)
    return problems


def prefix_refusal(prefix: str) -> str | None:
    """Why a host may not allow `prefix` (it would open names that are never allowed); None if it may."""
    if prefix.startswith(NEVER_ENV_PREFIXES) or any(p.startswith(prefix) for p in NEVER_ENV_PREFIXES):
        return f"{prefix}: covers loader or interpreter variables that are never allowed"
    if any(name.startswith(prefix) for name in NEVER_ENV_NAMES):
        return f"{prefix}: covers variables that are never allowed"
    return None


# ---- extra SGLang flags -----------------------------------------------------------------------------------------

# Flags `extra_args` may not carry, each with why. They import, unpickle or fetch code, read the arguments from a
# file (around every check here), or read and write files wherever they say. SGLang's argparse takes unique
# prefixes (`--tokenizer-p`), so a flag that is a prefix of one of these is refused too.
DENIED_FLAGS: dict[str, str] = {
    "--config": "reads more arguments from a YAML file",
    "--custom-weight-loader": "imports and calls Python functions by their import path",
    "--enable-custom-logit-processor": "lets each request carry a serialized Python callable that the server runs",
    "--tokenizer-path": "may name a hub repository whose code --trust-remote-code runs (use the model directory's)",
    "--speculative-token-map": "loads a file with torch.load, from any path or downloaded from the hub",
    "--init-expert-location": "loads a file with torch.load",
    "--lora-paths": "loads adapters from any path or downloads them from the hub",
    "--model-loader-extra-config": "configures the weight loader, including remote ones",
    "--download-dir": "writes downloaded weights wherever it says",
    "--decrypted-config-file": "reads a file from any path",
    "--decrypted-draft-config-file": "reads a file from any path",
    "--debug-tensor-dump-output-folder": "writes tensors wherever it says",
    "--debug-tensor-dump-input-file": "reads a file from any path",
    "--crash-dump-folder": "writes request dumps wherever it says",
    "--file-storage-path": "writes files wherever it says",
    "--export-metrics-to-file-dir": "writes files wherever it says",
    "--log-requests-target": "writes request logs wherever it says",
    "--ssl-keyfile": "reads a private key from any path",
    "--ssl-certfile": "reads a file from any path",
}
# A flag whose name has one of these words names a file, a directory or code to load; refused even when it is not
# in the list above (a newer SGLang may add such flags; spelled in full, they are caught by their words).
DENIED_FLAG_WORDS = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "dir",
        "dirs",
        "folder",
        "loader",
        "plugin",
        "plugins",
        "package",
        "module",
        "class",
        "cls",
        "socket",
        "config",
    }
)
MAX_EXTRA_ARGS = 64
MAX_EXTRA_ARG_LENGTH = 1024


def flag_clashes(flag: str, reserved: Iterable[str]) -> list[str]:
    """The `reserved` flags that `flag` names, in full or as an argparse prefix abbreviation."""
    return sorted(r for r in reserved if r == flag or r.startswith(flag))


def extra_args_refusals(args: list[str], managed: Iterable[str] = ()) -> list[str]:
    """Every reason `args` may not be appended to the launch command (empty: they may). `managed`: the flags
    specdash sets from the config's own fields (models.configs.MANAGED_FLAGS)."""
    if len(args) > MAX_EXTRA_ARGS:
        return [f"At most {MAX_EXTRA_ARGS} extra arguments"]
    problems = []
    for arg in args:
        if len(arg) > MAX_EXTRA_ARG_LENGTH:
            problems.append(f"An extra argument is longer than {MAX_EXTRA_ARG_LENGTH} characters")
        if CONTROL_CHARS.search(arg):
            problems.append("Extra arguments must not contain control characters or newlines")
        if arg.startswith("@"):
            problems.append(f"{arg[:40]!r}: an argument may not start with @ (argparse may read it as a file)")
    if args and not args[0].startswith("-"):
        problems.append(f"Extra arguments must start with a flag, not {args[0][:40]!r}")
    managed = tuple(managed)
    for arg in args:
        if not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        clash = flag_clashes(flag, managed)
        if clash:
            problems.append(f"{flag} is set by the config's own fields ({', '.join(clash)}); use those fields instead")
            continue
        denied = flag_clashes(flag, DENIED_FLAGS)
        if denied:
            problems.append(f"{flag} is not allowed: {denied[0]} {DENIED_FLAGS[denied[0]]}")
        elif DENIED_FLAG_WORDS & set(flag[2:].lower().split("-")):
            problems.append(f"{flag} is not allowed: it names a file, directory or code for the server to load")
    return problems


# ---- paths, names and numbers -----------------------------------------------------------------------------------

# The fields of a config that reach the launch command as one value each, with the longest value they take (the
# model's max_length).
TEXT_FIELDS = {"model_path": 512, "speculative_draft_model_path": 512, "served_model_name": 255}
# Inclusive bounds of the config's numbers; far above what any real server takes (SGLang's trees are a few dozen
# tokens, a node has 8 GPUs, a large deployment 64), far below what would overflow a column or a kernel's index.
NUMBER_BOUNDS = {
    "tp_size": (1, 64),
    "speculative_num_steps": (1, 16),
    "speculative_eagle_topk": (1, 64),
    "speculative_num_draft_tokens": (1, 256),
}


def text_refusal(label: str, value: str, max_length: int) -> str | None:
    """A path or name that becomes one argument of the launch: bounded, printable, never read as a flag."""
    if len(value) > max_length:
        return f"{label} is longer than {max_length} characters"
    if CONTROL_CHARS.search(value):
        return f"{label} must not contain control characters or newlines"
    if value.startswith(("-", "@")):
        return f"{label} must not start with - or @ (SGLang would read it as a flag)"
    return None


def launch_refusals(
    spec: Mapping[str, Any], extra_prefixes: Iterable[str] = (), managed: Iterable[str] = ()
) -> list[str]:
    """Every rule a config's launch spec (`ServerConfig.launch_spec()`) breaks; empty when it may be launched."""
    problems = []
    for field, max_length in TEXT_FIELDS.items():
        value = spec.get(field) or ""
        refusal = text_refusal(field, str(value), max_length)
        if refusal:
            problems.append(refusal)
    for field, (low, high) in NUMBER_BOUNDS.items():
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or not low <= value <= high):
            problems.append(f"{field} must be between {low} and {high}")
    env = spec.get("env") or {}
    problems += env_refusals(env, extra_prefixes) if isinstance(env, Mapping) else ["env must be an object"]
    args = spec.get("extra_args") or []
    if isinstance(args, list) and all(isinstance(a, str) for a in args):
        problems += extra_args_refusals(args, managed)
    else:
        problems.append("extra_args must be a list of strings")
    return problems
