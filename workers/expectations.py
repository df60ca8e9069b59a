"""A config's expectations (`ServerConfig.expect`) checked against what its server shows: the server args it
reports and the environment of its processes. Pure: the orchestrator gathers the facts, these say what is wrong."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .server_process import ServerProcess
from .sglang import arg_mismatches


def server_arg_problems(
    requested: Mapping[str, Any], expect: Mapping[str, Any], effective: Mapping[str, Any]
) -> list[str]:
    """What the server runs differently from the launch spec, then from `expect["server_args"]`."""
    problems = arg_mismatches(dict(requested), dict(effective))
    for key, want in (expect.get("server_args") or {}).items():
        if key not in effective:
            problems.append(f"expected server arg {key}={want!r}, but the server does not report {key}")
        elif effective[key] != want:
            problems.append(f"expected server arg {key}={want!r}, the server runs {key}={effective[key]!r}")
    return problems


def env_problems(wanted: Iterable[str], processes: Iterable[ServerProcess]) -> tuple[list[str], list[int]]:
    """(one description per process that lacks some of `wanted`, the pids whose environment is unreadable).

    setproctitle (used by SGLang for its scheduler titles) zeroes the environ block the kernel shows; an empty
    block proves nothing either way, so those processes are reported apart, not as missing the variables.
    """
    names = list(wanted)
    missing: list[str] = []
    unreadable: list[int] = []
    for process in processes:
        if not process.env_names:
            unreadable.append(process.pid)
            continue
        absent = [name for name in names if name not in process.env_names]
        if absent:
            missing.append(f"{', '.join(absent)} missing in pid {process.pid} ({process.title})")
    return missing, unreadable
