"""The host connection test: connect, pin the host key on first contact, read the GPU inventory."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from experiments.models import Host

from . import preflight
from .orchestrator import host_access
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
