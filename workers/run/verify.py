"""Verification: the server runs what was asked (its effective args, the config's expectations), every one of its
processes received the environment, and a first generation works. The checks are pure functions of what the
server shows; the phase gathers the facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp

from experiments.models import Run

from .. import engines
from . import environment
from .errors import RunFailed
from .server import ServerProcess
from .session import RunSession


async def verify(session: RunSession) -> None:
    await session.advance(Run.State.VERIFYING)
    expect = session.config.expect or {}
    engine = engines.of(session.config)
    effective = await engine.effective_args(session.api, session.server_log.server_args_dump)
    await session.update(effective_args=effective)
    problems = server_arg_problems(engine, session.config.launch_spec(), expect, effective)
    await session.server_log.flush()
    for text in expect.get("log_contains", []):
        if not await session.server_log.contains(text):
            problems.append(f"expected the log to contain {text!r}; it does not")
    if problems:
        raise RunFailed(Run.FailureKind.MISCONFIGURED, "; ".join(problems))
    processes = [ServerProcess.of(p) for p in await environment.read_process_env(session)]
    await _check_env_propagated(session, list(expect.get("env_propagated", [])), processes)
    await _smoke_test(session)


async def _check_env_propagated(session: RunSession, wanted: list[str], processes: list[ServerProcess]) -> None:
    if not wanted:
        return
    missing, unreadable = env_problems(wanted, processes)
    if missing:
        raise RunFailed(
            Run.FailureKind.ENV_NOT_PROPAGATED,
            "Environment variables did not reach every server process: " + "; ".join(missing),
        )
    if unreadable:
        note = {"env_check_unreadable_pids": unreadable}
        await session.update(effective_args={**session.run.effective_args, **note})


async def _smoke_test(session: RunSession) -> None:
    engine = engines.of(session.config)
    path, body = engine.smoke_request(session.config.served_model_name or session.config.model_path)
    try:
        status, text = await session.api.generate(path, body)
    except (aiohttp.ClientError, TimeoutError) as exc:
        await session.raise_if_server_died()
        raise RunFailed(Run.FailureKind.SMOKE_FAILED, f"The smoke generation failed: {exc!r}") from exc
    tokens = engine.smoke_tokens(text)
    if status != 200 or tokens <= 0:
        await session.raise_if_server_died()
        raise RunFailed(
            Run.FailureKind.SMOKE_FAILED,
            f"The smoke generation returned HTTP {status} with {tokens} tokens: {text[:300]}",
        )


# ---- the checks (pure) -----------------------------------------------------------------------------------


def server_arg_problems(
    engine: engines.Engine, requested: Mapping[str, Any], expect: Mapping[str, Any], effective: Mapping[str, Any]
) -> list[str]:
    """What the server runs differently from the launch spec, then from `expect["server_args"]`."""
    problems = engine.arg_mismatches(requested, effective)
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
