"""What a user may put into a server's launch on a GPU host: environment variables, extra SGLang flags, the shape of
paths and names, and the bounds of every value. Pure (no Django): the config form refuses what breaks these rules
with a field error, and the worker checks them again before it launches anything (defence in depth: a config stored
before a rule existed, or written around the forms, still never reaches a host).

Both lists are allowlists: `launch_flags.FLAG_RULES` and `launch_env.ENV_RULES` name every flag and variable a
member may set, each with the rule its value must follow; anything else is refused, naming it and who can allow it
(an admin, for one host: the flags of `launch_flags.HOST_FLAG_RULES` with the host's extra flags, any other in the
host's launcher, variables in the host's shell setup or, outside the engine's namespaces, with the host's extra
variable prefixes). Every value is passed to the host's shell as one quoted word
(`workers.ssh.quote_command`), so no value can run a command by itself; what the lists stop is a value that is
*meant* to make the server load code, read or write files, listen, or connect out.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from . import secrets
from .launch_env import ENGINE_ENV_NAMESPACES, ENV_RULES
from .launch_flags import FLAG_RULES, HOST_FLAG_RULES, NEVER_FLAGS
from .launch_values import Rule

ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
# Control characters (tab aside), C1 controls (U+0085 NEXT LINE among them) and the Unicode line and paragraph
# separators: str.splitlines() and log viewers break lines at each, so a value holding one makes logs and the
# NAME=VALUE text lie about what was set.
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")

# ---- environment variables --------------------------------------------------------------------------------------

# What a host's extra prefixes can never open, because the loader, an interpreter or a shell reads it as code or as
# where code is (LD_PRELOAD loads a library, PYTHONWARNINGS imports a module, BASH_ENV runs a file).
_NEVER_PREFIX_WORDS = "LD_ DYLD_ GCONV_ GLIBC_ MALLOC_ PYTHON PERL RUBY NODE_ JAVA_ _JAVA_ BASH_ SSH_ GIT_"
NEVER_ENV_PREFIXES = tuple(_NEVER_PREFIX_WORDS.split())
NEVER_ENV_NAMES = frozenset(
    {"PATH", "HOME", "SHELL", "ENV", "IFS", "PS4", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "BROWSER", "EDITOR"}
    | {"VISUAL", "PAGER", "LESSOPEN", "LESSCLOSE", "TMPDIR", "HOSTALIASES", "LOCPATH", "NLSPATH", "TERMINFO"}
    | {"PYTHONUNBUFFERED"}  # specdash sets it itself (the server's access lines must not be buffered)
)
# Within a host's extra prefix, a name that points at a file, a directory or a library stays the host's layout
# (SIMHOST_STATE_DIR): the admin allowed knobs, not paths.
_PATH_LIKE = re.compile(r"PLUGIN|INJECTION|PRELOAD|LIBRAR|FLAGS|PACKAGE|_(PATHS?|FILES?|FILENAME|DIRS?|HOME|ROOT)\Z")

MAX_ENV_VARS = 64
MAX_ENV_NAME_LENGTH = 128
MAX_ENV_VALUE_LENGTH = 4096  # a long NCCL_IB_HCA list is ~200 characters; a token is ~100


def _host_prefixes(extra_prefixes: Iterable[str]) -> tuple[str, ...]:
    # An empty, odd or overlapping prefix from a host row (stored before a rule) must not open anything.
    return tuple(p for p in extra_prefixes if isinstance(p, str) and ENV_NAME.match(p) and prefix_refusal(p) is None)


def is_launch_variable(name: str, extra_prefixes: Iterable[str] = ()) -> bool:
    """Whether `name` is a variable a launch may set on a host with `extra_prefixes` (what the effective environment
    of a server shows: the rest of a process's environment is the login's, not the experiment's)."""
    return name in ENV_RULES or name.startswith(_host_prefixes(extra_prefixes))


def env_name_refusal(name: str, extra_prefixes: Iterable[str] = ()) -> str | None:
    """Why `name` may not be set in a config's environment on a host with `extra_prefixes`; None if it may."""
    if not ENV_NAME.match(name) or len(name) > MAX_ENV_NAME_LENGTH:
        return f"{name[:MAX_ENV_NAME_LENGTH]!r} is not a valid environment variable name"
    if name in ENV_RULES:
        return None
    refused = f"{name}: not an allowed environment variable"
    if name in NEVER_ENV_NAMES or name.startswith(NEVER_ENV_PREFIXES):
        return (
            f"{refused}: the loader, an interpreter or the shell reads it as code or as where code is "
            "(no host may allow it)"
        )
    if name.startswith(_host_prefixes(extra_prefixes)):
        if _PATH_LIKE.search(name):
            return (
                f"{refused}: it names code, a library, a file or a directory for the server's processes to load or "
                "write (an admin can set it for a host, in the host's shell setup)"
            )
        return None
    if name.startswith(tuple(ENGINE_ENV_NAMESPACES)):
        return (
            f"{refused}: it is not on the list of variables a member may set "
            "(an admin can set it for a host, in the host's shell setup)"
        )
    return (
        f"{refused}: it is not on the list of variables a member may set "
        "(an admin can allow it for a host, with the host's extra variable prefixes)"
    )


def env_value_refusal(name: str, value: Any) -> str | None:
    value = secrets.reveal(value)  # a stored secret is checked by its value, as it was when it was typed
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"The value of {name} must be a string"
    text = str(value)
    if len(text) > MAX_ENV_VALUE_LENGTH:
        return f"The value of {name} is longer than {MAX_ENV_VALUE_LENGTH} characters"
    if CONTROL_CHARS.search(text):
        return f"The value of {name} must not contain control characters, newlines or line separators"
    rule = ENV_RULES.get(name)
    return rule.refusal(name, text) if rule else None


# The refusals of a value's shape (how many, how long, which characters, which type): what the API's schema states,
# unlike the lists of names and the value rules, which only this policy knows.
_SHAPE_REFUSAL = re.compile(
    r"\AAt most \d+ |is longer than \d+ characters|must not contain control|must be a string|is not a valid environment"
)


def is_shape_refusal(problem: str) -> bool:
    return bool(_SHAPE_REFUSAL.search(problem))


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
    """Why a host may not allow `prefix`; None if it may. A host's prefixes are for its own tools (SIMHOST_): the
    engine's variables are listed one by one, and the loader's and interpreters' are never allowed."""
    if prefix.startswith(NEVER_ENV_PREFIXES) or any(p.startswith(prefix) for p in NEVER_ENV_PREFIXES):
        return f"{prefix}: covers loader or interpreter variables that are never allowed"
    if any(name.startswith(prefix) for name in NEVER_ENV_NAMES):
        return f"{prefix}: covers variables that are never allowed"
    if any(prefix.startswith(ns) or ns.startswith(prefix) for ns in ENGINE_ENV_NAMESPACES):
        return f"{prefix}: overlaps the variables of SGLang or its libraries, which are allowed one by one"
    return None


# ---- extra SGLang flags -----------------------------------------------------------------------------------------

MAX_EXTRA_ARGS = 64
MAX_EXTRA_ARG_LENGTH = 1024
CANONICAL_FLAG = re.compile(r"--[a-z0-9]+(-[a-z0-9]+)*", re.ASCII)
_ADMIN_FLAG = "an admin can allow it for a host, in the host's launcher"
MAX_HOST_FLAGS = len(HOST_FLAG_RULES)


def host_flag_refusal(flag: str) -> str | None:
    """Why an admin may not allow `flag` for a host (`Host.extra_flags`); None if they may. Only the flags of
    HOST_FLAG_RULES may be allowed; the rest are either a member's already or never settable."""
    if flag in HOST_FLAG_RULES:
        return None
    if flag in NEVER_FLAGS:
        return f"{flag[:60]} {NEVER_FLAGS[flag]}: no host may allow it"
    if flag in FLAG_RULES:
        return f"{flag} is a member's to set already: a host need not allow it"
    return (
        f"{flag[:60]!r} is not on the list of flags an admin may allow for a host "
        f"({', '.join(sorted(HOST_FLAG_RULES))}); another flag goes in the host's launcher"
    )


def _host_flags(extra_flags: Iterable[str]) -> frozenset[str]:
    # A host row stored before a rule (or written around the form) opens only what the list allows today.
    return frozenset(f for f in extra_flags if isinstance(f, str) and f in HOST_FLAG_RULES)


def flag_rules(extra_flags: Iterable[str] = ()) -> dict[str, Rule]:
    """The flags a config may set on a host that allows `extra_flags`, with their value rules."""
    return {**FLAG_RULES, **{flag: HOST_FLAG_RULES[flag] for flag in _host_flags(extra_flags)}}


def flag_clashes(flag: str, reserved: Iterable[str], known: Iterable[str] = ()) -> list[str]:
    """The `reserved` flags that `flag` names, in full or as an argparse prefix abbreviation. A flag in `known` (a
    flag of SGLang's own, in full) abbreviates nothing: argparse takes an exact match before any prefix, so
    `--speculative-adaptive` is that switch, never `--speculative-adaptive-config`."""
    exact = flag in frozenset(known)
    return sorted(r for r in reserved if r == flag or (not exact and r.startswith(flag)))


def _looks_like_flag(arg: str) -> bool:
    # Any dash (hyphen, en and em dashes, minus signs, fullwidth hyphen): a server or a shell that normalises text
    # may read one as a flag, so it is judged as one.
    return bool(arg) and (unicodedata.category(arg[0]) == "Pd" or arg[0] in "\u2212\ufe63\uff0d")


def _flag_refusal(flag: str, managed: tuple[str, ...], rules: Mapping[str, Rule]) -> str | None:
    if not CANONICAL_FLAG.fullmatch(flag):
        canonical = "--" + re.sub(r"[\W_]+", "-", unicodedata.normalize("NFKC", flag)).strip("-").lower()
        return (
            f"{flag[:60]!r} is not a flag's canonical spelling (two ASCII hyphens, then lower-case words joined by "
            f"hyphens{', such as ' + canonical if CANONICAL_FLAG.fullmatch(canonical) else ''})"
        )
    clash = flag_clashes(flag, managed, (*rules, *HOST_FLAG_RULES))
    if clash:
        return f"{flag} is set by the config's own fields ({', '.join(clash)}); use those fields instead"
    if flag in rules:
        return None
    if flag in HOST_FLAG_RULES:
        return (
            f"{flag} is not allowed on this host: it is not on the list of flags a member may set "
            "(an admin can allow it for the host, with the host's extra flags)"
        )
    if flag in NEVER_FLAGS:
        return f"{flag} is never settable in a config: it {NEVER_FLAGS[flag]} (no host may allow it)"
    longer = [f for f in (*rules, *HOST_FLAG_RULES) if f.startswith(flag)]
    if longer:
        return f"{flag} is an abbreviation: write the flag in full ({', '.join(sorted(longer)[:3])})"
    return f"{flag} is not allowed: it is not on the list of flags a member may set ({_ADMIN_FLAG})"


def extra_args_refusals(args: list[str], managed: Iterable[str] = (), extra_flags: Iterable[str] = ()) -> list[str]:
    """Every reason `args` may not be appended to the launch command (empty: they may). `managed`: the flags
    specdash sets from the config's own fields (models.configs.MANAGED_FLAGS); `extra_flags`: those the host allows
    beyond a member's list (`Host.extra_flags`)."""
    if len(args) > MAX_EXTRA_ARGS:
        return [f"At most {MAX_EXTRA_ARGS} extra arguments"]
    problems = []
    for arg in args:
        if len(arg) > MAX_EXTRA_ARG_LENGTH:
            problems.append(f"An extra argument is longer than {MAX_EXTRA_ARG_LENGTH} characters")
        if CONTROL_CHARS.search(arg):
            problems.append("Extra arguments must not contain control characters, newlines or line separators")
        if arg.startswith("@"):
            problems.append(f"{arg[:40]!r}: an argument may not start with @ (argparse may read it as a file)")
    if args and not _looks_like_flag(args[0]):
        problems.append(f"Extra arguments must start with a flag, not {args[0][:40]!r}")
    managed = tuple(managed)
    rules = flag_rules(extra_flags)
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if not _looks_like_flag(arg):
            if index > 1:  # the first is reported above
                problems.append(f"{arg[:40]!r} follows a flag that takes no value")
            continue
        flag, has_value, value = arg.partition("=")
        refusal = _flag_refusal(flag, managed, rules)
        if refusal:
            problems.append(refusal)
            if not has_value and index < len(args) and not _looks_like_flag(args[index]):
                index += 1  # its value goes with it, unjudged
            continue
        rule = rules[flag]
        if not has_value and rule.takes_value:
            if index >= len(args):
                problems.append(f"{flag} needs a value: {rule.text}")
                continue
            value = args[index]
            index += 1
        elif has_value and not rule.takes_value:
            problems.append(f"{flag} is a switch and takes no value")
            continue
        if rule.takes_value:
            value_refusal = rule.refusal(flag, value)
            if value_refusal:
                problems.append(value_refusal)
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
    spec: Mapping[str, Any],
    extra_prefixes: Iterable[str] = (),
    managed: Iterable[str] = (),
    extra_flags: Iterable[str] = (),
) -> list[str]:
    """Every rule a config's launch spec (`ServerConfig.launch_spec()`) breaks on a host with `extra_prefixes` and
    `extra_flags`; empty when it may be launched."""
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
        problems += extra_args_refusals(args, managed, extra_flags)
    else:
        problems.append("extra_args must be a list of strings")
    return problems
