"""The host connection test: connect, pin the host key on first contact, read the GPU inventory."""

from __future__ import annotations

import asyncio
import shlex
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from experiments.models import Host

from . import hosts, preflight
from .hosts import HostReadError, host_access
from .ssh import HostConnection, SSHError


@dataclass(frozen=True)
class ProbeResult:
    host_key: str
    gpus: list[dict[str, Any]]


async def probe(host: Host, *, pin: bool) -> ProbeResult:
    conn = await HostConnection.open(host_access(host), pin=pin)
    try:
        result = await conn.run(
            "nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader,nounits"
        )
        if not result.ok:
            raise SSHError(f"nvidia-smi failed on {host.name}: {result.stderr.strip()[-300:]}")
        return ProbeResult(host_key=conn.server_host_key, gpus=preflight.parse_gpu_inventory(result.stdout))
    finally:
        await conn.close()


def test_host(host: Host) -> ProbeResult:
    """Pin the key if none is pinned yet (trust on first use, by an admin's explicit action); verify it after."""
    result = asyncio.run(probe(host, pin=not host.is_pinned))
    with transaction.atomic():
        fields = ["gpu_inventory"]
        host.gpu_inventory = result.gpus
        if not host.is_pinned:
            host.host_key = result.host_key
            fields.append("host_key")
        host.save(update_fields=fields)
    return result


MAX_MODELS = 200


async def list_models(host: Host) -> list[dict[str, Any]]:
    """Model directories under the host's models root: those holding a config.json, with what it says."""
    if not host.models_root:
        return []
    conn = await HostConnection.open(host_access(host))
    try:
        root = shlex.quote(host.models_root)
        find = f"find {root} -mindepth 2 -maxdepth 2 -name config.json -printf '%h\\n' 2>/dev/null"
        found = await conn.run(f"{find} | sort | head -n {MAX_MODELS}")
        models = []
        for path in found.stdout.split():
            try:
                config = await hosts.model_config(conn, host.name, path, "listed")
            except HostReadError:
                config = {}  # listed all the same: the path is what the form needs
            models.append(
                {
                    "path": path,
                    "name": path.rstrip("/").rsplit("/", 1)[-1],
                    "architectures": config.get("architectures", []),
                    "max_position_embeddings": config.get("max_position_embeddings"),
                    "vocab_size": config.get("vocab_size"),
                }
            )
        return models
    finally:
        await conn.close()
