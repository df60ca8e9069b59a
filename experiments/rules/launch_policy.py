"""What a user may put into a server's launch on a GPU host: environment variables, extra engine flags, the shape of
paths and names, and the bounds of every value. Pure (no Django): the config form refuses what breaks these rules
with a field error, and the worker checks them again before it launches anything (defence in depth: a config stored
before a rule existed, or written around the forms, still never reaches a host).

Both lists are allowlists: each engine's `FLAG_RULES` (`launch_flags` for SGLang, `vllm_launch_flags` for vLLM, in
`FLAGS_BY_ENGINE`) and `launch_env.ENV_RULES` name every flag and variable a member may set, each with the rule its
value must follow; anything else is refused, naming it and who can allow it (an admin, for one host: the flags of the
engine's `HOST_FLAG_RULES` with the host's extra flags, any other in the host's launcher, variables in the host's
shell setup or, outside the engines' namespaces, with the host's extra variable prefixes). The variables are one list
for every engine: an engine ignores another's. Every value is passed to the host's shell as one quoted word
(`workers.ssh.quote_command`), so no value can run a command by itself; what the lists stop is a value that is
*meant* to make the server load code, read or write files, listen, or connect out.

Long module: it is the one gate the forms, the API and the worker all call, and its parts (variables,
flags of each engine, paths and numbers) share the refusal wording and the rules on characters.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import launch_fields, launch_flags, secrets, vllm_launch_flags
from .launch_env import ENGINE_ENV_NAMESPACES, ENV_RULES
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
        return f"{prefix}: overlaps the variables of SGLang, vLLM or their libraries, which are allowed one by one"
    return None


# ---- extra engine flags -----------------------------------------------------------------------------------------

MAX_EXTRA_ARGS = 64
MAX_EXTRA_ARG_LENGTH = 1024
CANONICAL_FLAG = re.compile(r"--[a-z0-9]+(-[a-z0-9]+)*", re.ASCII)
_ADMIN_FLAG = "an admin can allow it for a host, in the host's launcher"
DEFAULT_ENGINE = "sglang"  # a config stored before configs named their engine


@dataclass(frozen=True)
class EngineFlags:
    """One engine's flag lists, as its module states them (`launch_flags`, `vllm_launch_flags`)."""

    label: str  # as the engine's users write it, in refusals
    rules: Mapping[str, Rule]  # a member's flags
    host_rules: Mapping[str, Rule]  # those an admin may allow for one host
    never: Mapping[str, str]  # why the worst are never allowed (an explanation, not a gate)
    short_flags: Mapping[str, str] = field(default_factory=dict)  # a short form -> the flag it stands for
    # The parser reads `_` as `-` and `--flag.key` as a key of a JSON flag (vLLM's FlexibleArgumentParser): a
    # refusal of such a spelling names the flag it stands for.
    other_spellings: bool = False


FLAGS_BY_ENGINE: dict[str, EngineFlags] = {
    "sglang": EngineFlags("SGLang", launch_flags.FLAG_RULES, launch_flags.HOST_FLAG_RULES, launch_flags.NEVER_FLAGS),
    "vllm": EngineFlags(
        "vLLM",
        vllm_launch_flags.FLAG_RULES,
        vllm_launch_flags.HOST_FLAG_RULES,
        vllm_launch_flags.NEVER_FLAGS,
        vllm_launch_flags.SHORT_FLAGS,
        other_spellings=True,
    ),
}
# A host's extra flags are one list whichever engine it runs: each engine opens only its own of them.
MAX_HOST_FLAGS = len({flag for flags in FLAGS_BY_ENGINE.values() for flag in flags.host_rules})


def engine_refusal(engine: str | None) -> str | None:
    """Why specdash cannot judge a launch of `engine`; None if it can (None and "" are SGLang, as stored before)."""
    if (engine or DEFAULT_ENGINE) in FLAGS_BY_ENGINE:
        return None
    return f"engine must be one of {', '.join(FLAGS_BY_ENGINE)}, not {str(engine)[:40]!r}"


def engine_flags(engine: str | None = DEFAULT_ENGINE) -> EngineFlags:
    """The lists of `engine`; ValueError (with `engine_refusal`'s words) for an engine specdash does not drive."""
    refusal = engine_refusal(engine)
    if refusal:
        raise ValueError(refusal)
    return FLAGS_BY_ENGINE[engine or DEFAULT_ENGINE]


def host_flag_refusal(flag: str, engine: str | None = DEFAULT_ENGINE) -> str | None:
    """Why an admin may not allow `flag` for a host (`Host.extra_flags`) running `engine`; None if they may. Only the
    flags of the engine's HOST_FLAG_RULES may be allowed; the rest are either a member's already or never settable."""
    refusal = engine_refusal(engine)
    if refusal:
        return refusal
    flags = FLAGS_BY_ENGINE[engine or DEFAULT_ENGINE]
    if flag in flags.host_rules:
        return None
    if flag in flags.never:
        return f"{flag[:60]} {flags.never[flag]}: no host may allow it"
    if flag in flags.rules:
        return f"{flag} is a member's to set already: a host need not allow it"
    return (
        f"{flag[:60]!r} is not on the list of flags an admin may allow for a host "
        f"({', '.join(sorted(flags.host_rules))}); another flag goes in the host's launcher"
    )


def host_flag_refusal_any_engine(flag: str) -> str | None:
    """Why an admin may not allow `flag` for a host whatever engine it runs; None if some engine's host list has
    it (a host's extra flags open, for each config, only its engine's). The refusal is that of the first engine
    whose lists name the flag, else SGLang's."""
    refusals = {engine: host_flag_refusal(flag, engine) for engine in FLAGS_BY_ENGINE}
    if None in refusals.values():
        return None
    naming = [e for e, f in FLAGS_BY_ENGINE.items() if flag in f.never or flag in f.rules]
    return refusals[naming[0] if naming else DEFAULT_ENGINE]


def _host_flags(extra_flags: Iterable[str], flags: EngineFlags) -> frozenset[str]:
    # A host row stored before a rule (or written around the form) opens only what the list allows today.
    return frozenset(f for f in extra_flags if isinstance(f, str) and f in flags.host_rules)


def flag_rules(extra_flags: Iterable[str] = (), engine: str | None = DEFAULT_ENGINE) -> dict[str, Rule]:
    """The flags a config of `engine` may set on a host that allows `extra_flags`, with their value rules;
    ValueError for an engine specdash does not drive."""
    flags = engine_flags(engine)
    return {**flags.rules, **{flag: flags.host_rules[flag] for flag in _host_flags(extra_flags, flags)}}


def flag_clashes(flag: str, reserved: Iterable[str], known: Iterable[str] = ()) -> list[str]:
    """The `reserved` flags that `flag` names, in full or as an argparse prefix abbreviation. A flag in `known` (a
    flag of the engine's own, in full) abbreviates nothing: argparse takes an exact match before any prefix, so
    `--speculative-adaptive` is that switch, never `--speculative-adaptive-config`."""
    exact = flag in frozenset(known)
    return sorted(r for r in reserved if r == flag or (not exact and r.startswith(flag)))


def _looks_like_flag(arg: str) -> bool:
    # Any dash (hyphen, en and em dashes, minus signs, fullwidth hyphen): a server or a shell that normalises text
    # may read one as a flag, so it is judged as one.
    return bool(arg) and (unicodedata.category(arg[0]) == "Pd" or arg[0] in "\u2212\ufe63\uff0d")


_OPTIMIZATION_LEVEL = re.compile(r"-O[0-9]*")  # vLLM's -O3 and -O 3 (reference §1.4)


def _spelling_refusal(flag: str, managed: tuple[str, ...], rules: Mapping[str, Rule], flags: EngineFlags) -> str | None:
    """A short form (`-tp`, `-O3`), a dotted key (`--speculative-config.method`) or an underscore spelling
    (`--max_model_len`) of a flag, refused with the flag it stands for and, when that flag is refused too, why;
    None if `flag` is none of these. The parser rewrites `_` to `-` up to the first dot (reference §1.2)."""
    head, dot, _ = flag.partition(".")
    underscored = head.startswith("--") and "_" in head
    if underscored:
        head = "--" + head[2:].replace("_", "-")
    short = "-O" if _OPTIMIZATION_LEVEL.fullmatch(head) else head
    full = flags.short_flags.get(short, head)
    if full == flag or not CANONICAL_FLAG.fullmatch(full):
        return None  # canonical already, or no spelling of a flag: the plain rules judge it
    if dot:
        said = f"{flag[:60]} sets a key of {full} ({flags.label}'s dotted form)"
    elif short in flags.short_flags:
        said = f"{flag[:60]} is {flags.label}'s short form of {full}"
    else:
        said = f"{flag[:60]} is an underscore spelling of {full}, which {flags.label} reads as that flag"
    why = _flag_refusal(full, managed, rules, flags)
    if why:
        return f"{said}; {why}"
    return f"{said}: write {full} with its whole value" if dot else f"{said}: write the flag in full ({full})"


def _flag_refusal(flag: str, managed: tuple[str, ...], rules: Mapping[str, Rule], flags: EngineFlags) -> str | None:
    if not CANONICAL_FLAG.fullmatch(flag):
        if flags.other_spellings:
            if flag in managed:  # a short form a config's field takes (-tp), said as it was written
                return f"{flag} is set by the config's own fields ({flag}); use those fields instead"
            spelled = _spelling_refusal(flag, managed, rules, flags)
            if spelled:
                return spelled
        canonical = "--" + re.sub(r"[\W_]+", "-", unicodedata.normalize("NFKC", flag)).strip("-").lower()
        return (
            f"{flag[:60]!r} is not a flag's canonical spelling (two ASCII hyphens, then lower-case words joined by "
            f"hyphens{', such as ' + canonical if CANONICAL_FLAG.fullmatch(canonical) else ''})"
        )
    clash = flag_clashes(flag, managed, (*rules, *flags.host_rules))
    if clash:
        return f"{flag} is set by the config's own fields ({', '.join(clash)}); use those fields instead"
    if flag in rules:
        return None
    if flag in flags.host_rules:
        return (
            f"{flag} is not allowed on this host: it is not on the list of flags a member may set "
            "(an admin can allow it for the host, with the host's extra flags)"
        )
    if flag in flags.never:
        return f"{flag} is never settable in a config: it {flags.never[flag]} (no host may allow it)"
    longer = [f for f in (*rules, *flags.host_rules) if f.startswith(flag)]
    if longer:
        return f"{flag} is an abbreviation: write the flag in full ({', '.join(sorted(longer)[:3])})"
    return f"{flag} is not allowed: it is not on the list of flags a member may set ({_ADMIN_FLAG})"


def extra_args_refusals(
    args: list[str], managed: Iterable[str] = (), extra_flags: Iterable[str] = (), engine: str | None = DEFAULT_ENGINE
) -> list[str]:
    """Every reason `args` may not be appended to the launch command of `engine` (empty: they may). `managed`: the
    flags specdash sets from the config's own fields (launch_fields.managed_flags); `extra_flags`: those the host
    allows beyond a member's list (`Host.extra_flags`)."""
    refusal = engine_refusal(engine)
    if refusal:
        return [refusal]
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
    flags = engine_flags(engine)
    rules = flag_rules(extra_flags, engine)
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if not _looks_like_flag(arg):
            if index > 1:  # the first is reported above
                problems.append(f"{arg[:40]!r} follows a flag that takes no value")
            continue
        flag, has_value, value = arg.partition("=")
        refusal = _flag_refusal(flag, managed, rules, flags)
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

# The fields of a config that reach the launch command as one value each, with the longest value they take, and the
# bounds of its numbers, are its engine's rows in `launch_fields` (far above what any real server takes: SGLang's
# trees are a few dozen tokens, a node has 8 GPUs, a large deployment 64; far below what would overflow a column or a
# kernel's index).


def text_refusal(label: str, value: str, max_length: int, engine: str | None = DEFAULT_ENGINE) -> str | None:
    """A path or name that becomes one argument of the launch: bounded, printable, never read as a flag."""
    if len(value) > max_length:
        return f"{label} is longer than {max_length} characters"
    if CONTROL_CHARS.search(value):
        return f"{label} must not contain control characters or newlines"
    if value.startswith(("-", "@")):
        engine_label = FLAGS_BY_ENGINE[engine].label if engine in FLAGS_BY_ENGINE else "the server"
        return f"{label} must not start with - or @ ({engine_label} would read it as a flag)"
    return None


def launch_refusals(
    spec: Mapping[str, Any],
    extra_prefixes: Iterable[str] = (),
    managed: Iterable[str] = (),
    extra_flags: Iterable[str] = (),
    engine: str | None = DEFAULT_ENGINE,
) -> list[str]:
    """Every rule a config's launch spec (`ServerConfig.launch_spec()`) breaks on a host with `extra_prefixes` and
    `extra_flags`, launched with `engine`; empty when it may be launched. `managed`: the flags `engine` takes from
    the config's own fields. An engine specdash does not drive is the one refusal: nothing else can be judged."""
    refusal = engine_refusal(engine)
    if refusal:
        return [refusal]
    engine = engine or DEFAULT_ENGINE
    problems = []
    for field_name, max_length in launch_fields.text_limits().items():
        value = spec.get(field_name) or ""
        refusal = text_refusal(field_name, str(value), max_length, engine)
        if refusal:
            problems.append(refusal)
    problems += launch_fields.refusals(engine, spec)
    env = spec.get("env") or {}
    problems += env_refusals(env, extra_prefixes) if isinstance(env, Mapping) else ["env must be an object"]
    args = spec.get("extra_args") or []
    if isinstance(args, list) and all(isinstance(a, str) for a in args):
        problems += extra_args_refusals(args, managed, extra_flags, engine)
    else:
        problems.append("extra_args must be a list of strings")
    return problems
