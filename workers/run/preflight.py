"""Preflight: what would make the launch fail or lie, checked on the host in seconds before any weight loads.

The config must keep to the launch policy (allowed environment variables and flags; checked again here because a
stored config may predate a rule), the GPUs must be free (someone else's memory would skew or break the run), the
port free, and the target and draft models a pair SGLang accepts.
"""

from __future__ import annotations

from experiments.models import Run

from .. import gpus, hosts, sglang
from . import server
from .errors import RunFailed
from .session import RunSession


async def check(session: RunSession) -> None:
    await session.advance(Run.State.PREFLIGHT)
    host, config = session.host, session.config
    refusals = server.launch_refusals(host, config)
    if refusals:
        raise RunFailed(Run.FailureKind.PREFLIGHT, f"Refusing to launch this config: {'; '.join(refusals)}.")
    conn = session.require_conn()
    await session.resolve_work_dir()
    try:
        busy = await hosts.compute_apps(conn)
        if busy:
            raise RunFailed(Run.FailureKind.PREFLIGHT, gpus.describe_busy_gpus(busy))
        if await hosts.port_in_use(conn, host.server_port):
            raise RunFailed(Run.FailureKind.PREFLIGHT, f"Port {host.server_port} on {host.name} is already in use.")
        target = await hosts.model_config(conn, host.name, config.model_path, "target")
        if not config.speculative_draft_model_path:
            return
        draft = await hosts.model_config(conn, host.name, config.speculative_draft_model_path, "draft")
    except hosts.HostReadError as exc:
        raise RunFailed(Run.FailureKind.PREFLIGHT, str(exc)) from exc
    context_length = sglang.context_length_arg(config.extra_args)
    problem = sglang.context_length_problem(
        target, draft, context_length=context_length, env=config.env
    ) or sglang.vocab_problem(target, draft)
    if problem:
        raise RunFailed(Run.FailureKind.PREFLIGHT, problem)
