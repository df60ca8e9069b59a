"""The GPU host's nvidia-smi: the queries specdash makes and their answers as values. Pure.

Formats follow ../shared/reference/nvidia-smi-h200.md (CSV, no header, no units).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from experiments.analysis.telemetry import GpuReading

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


# ---- the GPUs' details (a run's fingerprint) and their telemetry ------------------------------------------------

# Fields a driver of the 535+ series answers (all appear in the reference's outputs of driver 580), so that one
# unknown field cannot make the whole query fail on an older host.
GPU_DETAILS_FIELDS = (
    "index",
    "name",
    "uuid",
    "memory.total",
    "power.limit",
    "clocks.max.sm",
    "persistence_mode",
    "compute_mode",
    "driver_version",
    "vbios_version",
    "pci.bus_id",
)
GPU_DETAILS_QUERY = f"nvidia-smi --query-gpu={','.join(GPU_DETAILS_FIELDS)} --format=csv,noheader,nounits"

# `clocks_throttle_reasons.active` is still accepted by driver 580, whose header renames it
# `clocks_event_reasons.active`; asking by the old name also works on drivers that predate the rename.
TELEMETRY_FIELDS = (
    "index",
    "clocks.sm",
    "clocks.mem",
    "temperature.gpu",
    "power.draw",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "clocks_throttle_reasons.active",
)
TELEMETRY_QUERY = f"nvidia-smi --query-gpu={','.join(TELEMETRY_FIELDS)} --format=csv,noheader,nounits"


def telemetry_loop_command(interval_ms: int) -> str:
    """TELEMETRY_QUERY repeated every `interval_ms` until its output pipe closes (the sampler's SSH channel)."""
    return f"{TELEMETRY_QUERY} -lms {int(interval_ms)}"


def _number(text: str) -> float | None:
    """A value of a CSV cell with or without its unit ("405 MHz", "123.84 W", "0 %"); None for "[N/A]"."""
    word = text.strip().split(" ")[0] if text.strip() else ""
    try:
        return float(word)
    except ValueError:
        return None


def _mask(text: str) -> int | None:
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def _csv_rows(csv_text: str, width: int) -> list[list[str]]:
    """Data rows of `width` cells; a header line (which starts with a field name, not an index) is skipped."""
    rows = []
    for line in csv_text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == width and parts[0].isdigit():
            rows.append(parts)
    return rows


def parse_gpu_details(csv_text: str) -> list[dict[str, Any]]:
    """The answer to GPU_DETAILS_QUERY -> one dict per GPU (numbers as numbers, None where not reported)."""
    gpus = []
    for parts in _csv_rows(csv_text, len(GPU_DETAILS_FIELDS)):
        row = dict(zip(GPU_DETAILS_FIELDS, parts, strict=True))
        total, limit, max_sm = (_number(row[k]) for k in ("memory.total", "power.limit", "clocks.max.sm"))
        gpus.append(
            {
                "index": int(row["index"]),
                "name": row["name"],
                "uuid": row["uuid"],
                "memory_total_mib": int(total) if total is not None else None,
                "power_limit_w": limit,
                "max_sm_clock_mhz": int(max_sm) if max_sm is not None else None,
                "persistence_mode": row["persistence_mode"],
                "compute_mode": row["compute_mode"],
                "driver_version": row["driver_version"],
                "vbios_version": row["vbios_version"],
                "pci_bus_id": row["pci.bus_id"],
            }
        )
    return gpus


def parse_telemetry_line(line: str, t: float = 0.0) -> GpuReading | None:
    """One line of TELEMETRY_QUERY's answer (with or without units), read at `t`, -> a reading; None for anything
    else."""
    rows = _csv_rows(line, len(TELEMETRY_FIELDS))
    if not rows:
        return None
    values = rows[0]

    def whole(i: int) -> int | None:
        number = _number(values[i])
        return int(number) if number is not None else None

    return GpuReading(
        gpu=int(values[0]),
        sm_mhz=whole(1),
        mem_mhz=whole(2),
        temperature_c=whole(3),
        power_w=_number(values[4]),
        utilization_pct=whole(5),
        memory_utilization_pct=whole(6),
        memory_used_mib=whole(7),
        reasons=_mask(values[8]),
        t=t,
    )


def parse_telemetry(csv_text: str) -> list[GpuReading]:
    return [s for s in (parse_telemetry_line(line) for line in csv_text.splitlines()) if s is not None]


def driver_cuda_version(banner: str) -> str | None:
    """The CUDA version the driver supports, from plain `nvidia-smi`'s banner (`CUDA Version: 13.0`)."""
    marker = "CUDA Version:"
    for line in banner.splitlines():
        if marker in line:
            words = line.split(marker, 1)[1].split()
            return words[0] if words else None
    return None
