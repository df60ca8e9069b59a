"""The simulated GPUs and the registry of the memory processes hold on them.

Each scheduler process writes `<state dir>/gpu/<pid>.json`:
`{"pid": 123, "start_time": "4567", "name": "sglang::scheduler_TP0", "memory_mib": {"0": 127000}, "leak": false}`.
An entry counts while its pid is alive with the same start time (pids get reused), or forever when `leak` is
set (until `nvidia-smi --gpu-reset`). Stale files are removed by whoever reads the registry.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simhost import knobs


def registry_dir(env: Mapping[str, str] | None = None) -> Path:
    return knobs.state_dir(env) / "gpu"


def gpu_count(env: Mapping[str, str] | None = None) -> int:
    return int(knobs.get("SIMHOST_GPUS", env))


def gpu_uuid(index: int) -> str:
    digest = hashlib.sha1(f"{socket.gethostname()}-{os.getuid()}-{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def bus_id(index: int) -> str:
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


def visible_gpus(env: Mapping[str, str] | None = None) -> list[int]:
    """Physical GPU indices in CUDA order, honouring CUDA_VISIBLE_DEVICES (integers only)."""
    env = os.environ if env is None else env
    count = gpu_count(env)
    spec = env.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return list(range(count))
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part.lstrip("-").isdigit() or not 0 <= int(part) < count:
            break  # CUDA stops at the first invalid entry
        out.append(int(part))
    return out


def process_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def register(
    memory_mib: Mapping[int, int], name: str, leak: bool = False, env: Mapping[str, str] | None = None
) -> None:
    pid = os.getpid()
    folder = registry_dir(env)
    folder.mkdir(parents=True, exist_ok=True)
    entry = {
        "pid": pid,
        "start_time": process_start_time(pid),
        "name": name,
        "memory_mib": {str(k): int(v) for k, v in memory_mib.items()},
        "leak": leak,
    }
    tmp = folder / f".{pid}.tmp"
    tmp.write_text(json.dumps(entry))
    tmp.replace(folder / f"{pid}.json")


def unregister(env: Mapping[str, str] | None = None) -> None:
    try:
        (registry_dir(env) / f"{os.getpid()}.json").unlink()
    except FileNotFoundError:
        pass


def _is_alive(entry: dict[str, Any]) -> bool:
    start = process_start_time(entry["pid"])
    if start is None:
        return False
    try:
        state = Path(f"/proc/{entry['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and (entry.get("start_time") in (None, start))


def entries(env: Mapping[str, str] | None = None, clean: bool = True) -> list[dict[str, Any]]:
    """Registry entries that hold memory now: live processes, plus leaked ones."""
    out = []
    folder = registry_dir(env)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        alive = _is_alive(entry)
        entry["alive"] = alive
        if alive or entry.get("leak"):
            out.append(entry)
        elif clean:
            path.unlink(missing_ok=True)
    return out


def used_mib(env: Mapping[str, str] | None = None, exclude_pid: int | None = None) -> dict[int, int]:
    used: dict[int, int] = {}
    for entry in entries(env):
        if entry["pid"] == exclude_pid:
            continue
        for gpu, mib in entry["memory_mib"].items():
            used[int(gpu)] = used.get(int(gpu), 0) + int(mib)
    return used


def reset(env: Mapping[str, str] | None = None) -> int:
    """Forget leaked entries of dead processes (what a GPU reset would free). Returns how many."""
    count = 0
    folder = registry_dir(env)
    for entry in entries(env):
        if not entry["alive"]:
            (folder / f"{entry['pid']}.json").unlink(missing_ok=True)
            count += 1
    return count
