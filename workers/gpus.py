"""The GPU host's nvidia-smi: the queries specdash makes and their answers as values. Pure.

Formats follow ../shared/reference/nvidia-smi-h200.md (CSV, no header, no units).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

COMPUTE_APPS_QUERY = "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits"
GPU_INVENTORY_QUERY = "nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader,nounits"


@dataclass(frozen=True)
class ComputeApp:
    pid: int
    used_mib: int
    gpu_index: int | None = None


def parse_compute_apps(csv_text: str) -> list[ComputeApp]:
    """The answer to COMPUTE_APPS_QUERY -> apps."""
    apps = []
    for line in csv_text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        try:
            used = int(float(parts[1]))
        except ValueError:
            # Some drivers (and MIG) report "[N/A]": the process still holds the GPU, we just don't know how much.
            used = 0
        gpu = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
        apps.append(ComputeApp(pid=int(parts[0]), used_mib=used, gpu_index=gpu))
    return apps


def parse_gpu_inventory(csv_text: str) -> list[dict[str, Any]]:
    """The answer to GPU_INVENTORY_QUERY -> GPUs."""
    gpus = []
    for line in csv_text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        try:
            gpus.append(
                {
                    "index": int(parts[0]),
                    "name": parts[1],
                    "memory_used_mib": int(float(parts[2])),
                    "memory_total_mib": int(float(parts[3])),
                }
            )
        except ValueError:
            continue
    return gpus


def describe_busy_gpus(apps: list[ComputeApp]) -> str:
    held = ", ".join(
        f"pid {a.pid} holds {a.used_mib} MiB" if a.used_mib else f"pid {a.pid} holds GPU memory (amount not reported)"
        for a in apps
    )
    return f"GPUs are busy: {held}. Stop those processes (or clean the host) before running here."
