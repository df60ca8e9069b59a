"""What the run runs on: the host's fingerprint, read in one command just before the launch, and the environment
each server process received, read in one command once it is ready. Neither read fails a run: what could not be
read is recorded as such (and said in a warning)."""

from __future__ import annotations

import dataclasses

from experiments.actions.environments import do_record_fingerprint, do_record_process_env
from experiments.actions.hosts import do_read_host_again_for_version
from experiments.rules import secrets

from .. import engines
from ..hostreads import environ, fingerprint
from ..ssh import SSHError
from .session import RunSession, db

FINGERPRINT_TIMEOUT = 120.0  # git on a large checkout, an nvidia-smi waking a GPU without persistence mode


async def read_fingerprint(session: RunSession) -> None:
    host, config = session.host, session.config
    env = host.effective_env(config.env)
    # No secret on a command line: the probe reads package versions, which no token changes.
    engine = engines.of(config)
    script = fingerprint.script(fingerprint.launcher_python(engine.launcher(host), host.python), secrets.public(env))
    found, error = {}, ""
    try:
        result = await session.require_conn().run(script, timeout=FINGERPRINT_TIMEOUT)
    except SSHError as exc:
        error = str(exc)
    else:
        found = fingerprint.parse(result.stdout)
        error = "; ".join(found.get("problems") or [])
    host_names = [name for name in (host.default_env or {}) if name not in (config.env or {})]
    await db(do_record_fingerprint)(session.run, found, error, env, host_names)
    if engine.flags_listed:
        version = ((found.get("packages") or {}).get(engine.name) or {}).get("version")
        await db(do_read_host_again_for_version)(host, str(version) if version else None)
    if error:
        await session.warn("fingerprint", f"Part of the host's environment fingerprint could not be read: {error}")


async def read_process_env(session: RunSession) -> list[environ.ProcessEnv]:
    """Every process of the server's group with the environment it received (None: unreadable), recorded with the
    launch policy's variables only."""
    group = session.group()
    if group is None:
        return []
    processes = await group.environs()
    extra = session.host.extra_env_prefixes or ()
    await db(do_record_process_env)(
        session.run,
        [
            {
                **dataclasses.asdict(p),
                "env": environ.shown_env(p.env, extra) if p.env is not None else None,
            }
            for p in processes
        ],
    )
    return processes
