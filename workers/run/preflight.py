"""Preflight: what would make the launch fail or lie, checked on the host in seconds before any weight loads.

The config must keep to the launch policy (allowed environment variables and flags; checked again here because a
stored config may predate a rule), the GPUs must be free (someone else's memory would skew or break the run), the
port free, and the target and draft models a pair SGLang accepts. A pair SGLang accepts but serves wrong (an
EAGLE3 draft served as EAGLE, which accepts nothing) is a warning on the run.

The first run of an experiment to get here also checks every other config of the experiment, so that a bad
candidate fails in seconds instead of after the baseline's whole benchmark.
"""

from __future__ import annotations

from typing import Any

from experiments.actions.runs import do_claim_config_check, do_fail_config_in_preflight
from experiments.models import Host, Run, ServerConfig
from experiments.rules import model_checks
from workers.hostreads import gpus

from .. import engines, hosts
from ..ssh import HostConnection
from . import environment, server
from .errors import RunFailed
from .session import RunSession, db

ALGORITHM_MISMATCH = "algorithm_mismatch"


async def check(session: RunSession) -> None:
    await session.advance(Run.State.PREFLIGHT)
    host, config = session.host, session.config
    problem = _refusal(host, config)  # before the host is touched at all
    if problem:
        raise RunFailed(Run.FailureKind.PREFLIGHT, problem)
    conn = session.require_conn()
    models = ModelReader(conn, host)
    await session.resolve_work_dir()
    try:
        busy = await hosts.compute_apps(conn)
        if busy:
            raise RunFailed(Run.FailureKind.PREFLIGHT, gpus.describe_busy_gpus(busy))
        if await hosts.port_in_use(conn, host.server_port):
            raise RunFailed(Run.FailureKind.PREFLIGHT, f"Port {host.server_port} on {host.name} is already in use.")
    except hosts.HostReadError as exc:
        raise RunFailed(Run.FailureKind.PREFLIGHT, str(exc)) from exc
    problem = await model_problem(models, config)
    if problem:
        raise RunFailed(Run.FailureKind.PREFLIGHT, problem)
    warning = await algorithm_warning(models, config)
    if warning:
        await session.warn(ALGORITHM_MISMATCH, warning)
    await _check_the_other_configs(session, models)
    await environment.read_fingerprint(session)


async def _check_the_other_configs(session: RunSession, models: ModelReader) -> None:
    """Once per experiment: fail the queued runs of every other config that could not launch."""
    others: list[ServerConfig] | None = await db(do_claim_config_check)(session.run)
    for other in others or ():
        problem = _refusal(session.host, other) or await model_problem(models, other)
        if problem:
            await db(do_fail_config_in_preflight)(session.run.experiment_id, other.pk, problem)


def _refusal(host: Host, config: ServerConfig) -> str | None:
    refusals = server.launch_refusals(host, config)
    return f"Refusing to launch this config: {'; '.join(refusals)}." if refusals else None


class ModelReader:
    """The config.json of the host's model directories, each read once per preflight."""

    def __init__(self, conn: HostConnection, host: Host) -> None:
        self.conn, self.host = conn, host
        self._read: dict[tuple[str, str], dict[str, Any]] = {}

    async def config_of(self, path: str, role: str) -> dict[str, Any]:
        if (path, role) not in self._read:
            self._read[path, role] = await hosts.model_config(self.conn, self.host, path, role)
        return self._read[path, role]


async def algorithm_warning(models: ModelReader, config: ServerConfig) -> str | None:
    """An EAGLE3 draft served as EAGLE: SGLang runs it and accepts nothing. A warning, not a refusal (the user may
    mean to measure exactly that); the live acceptance alarm says it again if the benchmark collapses."""
    if not config.speculative_draft_model_path:
        return None
    try:
        draft = await models.config_of(config.speculative_draft_model_path, "draft")
    except hosts.HostReadError:
        return None  # model_problem has said why
    return engines.of(config).algorithm_problem(config.speculative_algorithm, draft)


async def model_problem(models: ModelReader, config: ServerConfig) -> str | None:
    """Why the engine would refuse `config`'s target and draft pair (missing config.json, short draft context,
    vocab mismatch), or a method that drafts with the target's MTP layers on a target without any; or None."""
    try:
        target = await models.config_of(config.model_path, "target")
        if not config.speculative_draft_model_path:
            return model_checks.mtp_problem(config.engine, config.speculative_algorithm, target)
        draft = await models.config_of(config.speculative_draft_model_path, "draft")
    except hosts.HostReadError as exc:
        return str(exc)
    return engines.of(config).model_problem(
        target, draft, spec=config.launch_spec(), env=models.host.effective_env(config.env)
    )
