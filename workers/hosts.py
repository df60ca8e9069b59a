"""Reaching a registered host over SSH, and the reads of it that more than one phase makes."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from django.conf import settings

from experiments.models import Host

from .preflight import ComputeApp, parse_compute_apps
from .ssh import HostAccess, HostConnection

COMPUTE_APPS_QUERY = "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits"


class HostReadError(Exception):
    """A read of the host's state failed; the message says what and why, for the run's failure."""


def host_access(host: Host) -> HostAccess:
    key_path = Path(settings.SPECDASH_SSH_KEY_DIR) / host.key_name if host.key_name else None
    return HostAccess(
        name=host.name,
        address=host.address,
        port=host.port,
        username=host.username,
        key_path=key_path,
        host_key=host.host_key,
        shell_setup=host.shell_setup,
        work_dir=host.work_dir,
    )


async def compute_apps(conn: HostConnection) -> list[ComputeApp]:
    """The processes holding GPU memory on the host, by nvidia-smi."""
    result = await conn.run(COMPUTE_APPS_QUERY)
    if not result.ok:
        raise HostReadError(f"nvidia-smi failed on the host: {result.stderr_tail()}")
    return parse_compute_apps(result.stdout)


async def model_config(conn: HostConnection, host_name: str, path: str, role: str) -> dict[str, Any]:
    """The config.json of a model directory on the host (`role`: "target" or "draft", for the message)."""
    result = await conn.run(f"cat -- {shlex.quote(path.rstrip('/') + '/config.json')}")
    if not result.ok:
        raise HostReadError(
            f"The {role} model path {path} has no readable config.json on {host_name}: {result.stderr_tail()}"
        )
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise HostReadError(f"The {role} model's config.json is not JSON: {exc}") from exc
    return data if isinstance(data, dict) else {}
