"""Hosts, and the models a host lists."""

from __future__ import annotations

from typing import Any

from experiments.models import (
    Host,
)
from experiments.rules import secrets


def host_json(h: Host) -> dict[str, Any]:
    return {
        "id": h.pk,
        "name": h.name,
        "address": h.address,
        "port": h.port,
        "username": h.username,
        "key_name": h.key_name,
        "extra_env_prefixes": h.extra_env_prefixes,
        "extra_flags": h.extra_flags,
        "draft_training_dirs": h.draft_training_dirs,
        "default_env": secrets.shown(h.default_env or {}),
        "work_dir": h.work_dir,
        "models_root": h.models_root,
        "launcher": h.launcher,
        "vllm_launcher": h.vllm_launcher,
        "specforge_launcher": h.specforge_launcher,
        "server_port": h.server_port,
        "cost_per_gpu_hour": h.cost_per_gpu_hour,
        # An admin's quotas for members' launches here (null: the SPECDASH_QUOTA_* default), and what applies.
        "quota_launches_queued": h.quota_launches_queued,
        "quota_gpu_hours_per_day": h.quota_gpu_hours_per_day,
        "launch_quota": h.launch_quota,
        "gpu_hours_quota": h.gpu_hours_quota,
        # What one run here may store (null: the SPECDASH_RUN_*_CAP_MIB default), and what applies, in bytes.
        "run_log_cap_mib": h.run_log_cap_mib,
        "run_trace_cap_mib": h.run_trace_cap_mib,
        "run_log_cap_bytes": h.run_log_cap,
        "run_trace_cap_bytes": h.run_trace_cap,
        "pinned": h.is_pinned,
        "host_key": h.host_key,
        "gpus": h.gpu_inventory,
        "dirty": h.is_dirty,
        "dirty_reason": h.dirty_reason,
        "active_run": h.active_run_id,
        "models_listed_at": models_listed_at(h),
        # The flags the host's SGLang accepts, as read from its launcher's --help (null: not read with this launcher).
        "server_flags": sorted(known) if (known := h.known_server_flags()) is not None else None,
        "sglang_version": h.listed_sglang_version,
        "server_flags_read_at": h.server_flags_at.isoformat() if known is not None and h.server_flags_at else None,
    }


def models_listed_at(h: Host) -> str | None:
    """When the host's stored model listing was read (None: never, or under another models root)."""
    listed = h.model_inventory_at is not None and (h.model_inventory or {}).get("models_root") == h.models_root
    return h.model_inventory_at.isoformat() if listed and h.model_inventory_at else None
