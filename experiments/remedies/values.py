"""The values remedies are made of (a config change, a remedy, the evidence of a failure) and the readers of
the things they cite: a config's extra flags, the server_args line of a log. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from experiments.rules.launch_policy import flag_clashes

# The server args remedies read, from /get_server_info or the log's `server_args=` line.
SERVER_ARG_NAMES = (
    "mem_fraction_static",
    "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode",
    "disable_cuda_graph",
    "cuda_graph_backend_decode",
    "context_length",
)


class Link:
    """Where a piece of advice is acted on: the host's page (its admins), or a copy of the experiment (its profile)."""

    HOST = "host"
    COPY = "copy"


@dataclass(frozen=True)
class Change:
    """A change of a config's launch: env vars to set; flags to set (value None: a switch), replacing whatever
    spelling of them extra_args has (argparse takes unique prefixes, `--mem-fraction 0.9`); exact tokens to drop."""

    env: Mapping[str, str] = field(default_factory=dict)
    args: Mapping[str, str | None] = field(default_factory=dict)
    drop: tuple[str, ...] = ()

    def apply(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The launch spec (`ServerConfig.launch_spec()`) with this change made."""
        args = list(spec.get("extra_args") or [])
        for token in self.drop:
            if token in args:
                args.remove(token)
        for flag, value in self.args.items():
            args = [*without_flag(args, flag), flag, *([] if value is None else [value])]
        return {**spec, "env": {**(spec.get("env") or {}), **self.env}, "extra_args": args}

    def as_json(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """What it sets and drops, in words, and the env and extra args of the config `spec` after it."""
        after = self.apply(spec)
        return {
            "set_env": dict(self.env),
            "set_args": dict(self.args),
            "drop_args": list(self.drop),
            "text": self.describe(),
            "env": after["env"],
            "extra_args": after["extra_args"],
        }

    def describe(self) -> str:
        parts = [f"{name}={value}" for name, value in self.env.items()]
        parts += [flag if value is None else f"{flag} {value}" for flag, value in self.args.items()]
        parts += [f"without {token}" for token in self.drop]
        return ", ".join(parts)


class RemedyRefused(Exception):
    """The remedy cannot be applied: the run has none by that id, it is advice, or the changed config is refused."""

    def __init__(self, message: str, errors: dict[str, list[str]] | None = None, *, kind: str = "conflict") -> None:
        super().__init__(message)
        self.errors = errors or {}
        # What kind of refusal (the API's status): "not_found" (no such remedy), or "conflict" with the run, its
        # experiment or the config the change makes.
        self.kind = kind


@dataclass(frozen=True)
class Remedy:
    id: str  # stable for the same evidence: the page posts it back and the action finds the remedy again by it
    title: str
    explanation: str  # cites the evidence it comes from
    change: Change | None = None  # None: advice, acted on elsewhere
    label: str = ""  # what the name of the config's new version adds, e.g. "mem 0.83"
    admin: bool = False  # needs an admin (the host's state or setup)
    link: str = ""  # a Link value

    def as_json(self, spec: Mapping[str, Any], links: Mapping[str, str]) -> dict[str, Any]:
        """As the run page and the API show it, for the config `spec`; `links`: the address of each Link."""
        return {
            "id": self.id,
            "title": self.title,
            "explanation": self.explanation,
            "change": None if self.change is None else self.change.as_json(spec),
            "admin": self.admin,
            "link": links.get(self.link),
        }


@dataclass(frozen=True)
class Evidence:
    """What is known about a failed run, beyond its config."""

    kind: str
    message: str = ""
    excerpt: str = ""
    server_args: Mapping[str, Any] = field(default_factory=dict)  # only SERVER_ARG_NAMES are read
    server_facts: Mapping[str, Any] = field(default_factory=dict)  # Run.server_facts()
    pids: Sequence[int] = ()  # the server's processes
    host_name: str = "the host"
    host_dirty_reason: str | None = None  # None: the host is not marked dirty
    readiness_timeout_s: int | None = None
    stall_timeout_s: int | None = None
    request_tokens: int | None = None  # the profile's input + output length: the longest request it sends

    @property
    def text(self) -> str:
        return f"{self.message}\n{self.excerpt}"


def server_args_in(line: str) -> dict[str, Any]:
    """The SERVER_ARG_NAMES a `server_args=ServerArgs(...)` (or, era C, `server_args={...}`) log line gives."""
    found: dict[str, Any] = {}
    for name in SERVER_ARG_NAMES:
        match = re.search(rf"(?<!\w){name}['\"]?\s*[=:]\s*([^,)}}\s]+)", line)
        if match is not None:
            found[name] = _literal(match.group(1))
    return found


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value the last spelling of `flag` in `args` gives it ("" for a switch), or None if it is not there."""
    value = None
    for i, token in enumerate(args):
        name, equals, inline = token.partition("=")
        if not token.startswith("--") or not flag_clashes(name, [flag]):
            continue
        if equals:
            value = inline
        else:
            following = args[i + 1] if i + 1 < len(args) else ""
            value = "" if following.startswith("--") else following
    return value


def without_flag(args: Sequence[str], flag: str) -> list[str]:
    """`args` without any spelling of `flag` and the value that follows it."""
    out: list[str] = []
    skip_value = False
    for token in args:
        if skip_value and not token.startswith("--"):
            skip_value = False
            continue
        skip_value = False
        name, equals, _ = token.partition("=")
        if token.startswith("--") and flag_clashes(name, [flag]):
            skip_value = not equals
            continue
        out.append(token)
    return out


def _literal(text: str) -> Any:
    text = text.strip("'\"")
    if text in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def first_line(text: str, pattern: re.Pattern[str] | None = None) -> str:
    """The evidence's first line (matching `pattern`, if one does), as short as a sentence can quote it."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = next((line for line in lines if pattern is not None and pattern.search(line)), lines[0] if lines else "")
    return line if len(line) <= 240 else line[:239] + "…"


def as_number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
