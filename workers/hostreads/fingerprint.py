"""A run's environment fingerprint: one shell script run on the GPU host before the launch, and its answer as
values. Pure: the worker sends the script over SSH, `bench/gpu_host_check.py` runs it locally, both parse alike.

The script prints sections, each after a `@@<name>` line: the kernel, the GPUs' details, nvidia-smi's banner (the
driver's CUDA version) and the Python probe's JSON (`probe.py`, run by the interpreter that launches SGLang, with the
environment the server will get).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workers.hostreads import gpus

PROBE_SOURCE = (Path(__file__).resolve().parent / "probe.py").read_text()
SECTION = "@@"
MAX_SECTION_CHARS = 200_000


def launcher_python(launcher: str, default: str = "python3") -> list[str]:
    """The interpreter words of a launcher such as `/opt/venv/bin/python -m sglang.launch_server` (what comes before
    `-m`); `default` for a launcher that is not `<python> -m <module>`."""
    words = shlex.split(launcher)
    if "-m" in words and words.index("-m") > 0:
        return words[: words.index("-m")]
    return shlex.split(default) or ["python3"]


def script(python: Sequence[str], env: Mapping[str, str]) -> str:
    """The shell script that prints every section; each value is one quoted word, so `env` cannot run anything."""
    assignments = " ".join(shlex.quote(f"{name}={value}") for name, value in env.items())
    probe = " ".join(shlex.quote(word) for word in [*python, "-c", PROBE_SOURCE])
    return "\n".join(
        [
            f"echo {SECTION}kernel; uname -r",
            f"echo {SECTION}gpus; {gpus.GPU_DETAILS_QUERY} 2>&1",
            f"echo {SECTION}banner; nvidia-smi 2>&1 | grep -m1 'CUDA Version'",
            f"echo {SECTION}python; env {assignments} {probe} 2>&1",
            f"echo {SECTION}end",
        ]
    )


def sections(output: str) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        if line.startswith(SECTION) and line[len(SECTION) :].isidentifier():
            current = found.setdefault(line[len(SECTION) :], [])
            continue
        if current is not None:
            current.append(line)
    return {name: "\n".join(lines)[:MAX_SECTION_CHARS] for name, lines in found.items()}


def parse(output: str) -> dict[str, Any]:
    """The script's output -> the fingerprint: {kernel, gpus, gpu_summary, driver, cuda_driver, python, packages,
    problems}. What could not be read is missing, with a line in `problems` that says why."""
    parts = sections(output)
    problems: list[str] = []
    found: dict[str, Any] = {"kernel": parts.get("kernel", "").strip() or None}
    gpu_rows = gpus.parse_gpu_details(parts.get("gpus", ""))
    if not gpu_rows:
        problems.append(f"nvidia-smi did not list the GPUs: {parts.get('gpus', '').strip()[:300] or 'no output'}")
    found["gpus"] = gpu_rows
    found["gpu_summary"] = gpu_summary(gpu_rows)
    found["driver"] = gpu_rows[0]["driver_version"] if gpu_rows else None
    found["cuda_driver"] = gpus.driver_cuda_version(parts.get("banner", ""))
    probe = _probe_json(parts.get("python", ""))
    if probe is None:
        problems.append(f"The Python probe failed: {parts.get('python', '').strip()[-300:] or 'no output'}")
        probe = {}
    found["python"] = probe.get("python")
    found["executable"] = probe.get("executable")
    found["packages"] = probe.get("packages") or {}
    if "end" not in parts:
        problems.append("The fingerprint script stopped before its end.")
    found["problems"] = problems
    return found


def _probe_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            return data if isinstance(data, dict) else None
    return None


def gpu_summary(rows: list[dict[str, Any]]) -> str:
    """ "8 x NVIDIA H200, 143771 MiB, 700 W limit, max SM 1980 MHz, persistence Enabled" (groups differing GPUs)."""
    groups: dict[str, int] = {}
    for row in rows:
        limit = f"{row['power_limit_w']:.0f} W limit" if row.get("power_limit_w") is not None else "no power limit"
        key = (
            f"{row['name']}, {row.get('memory_total_mib')} MiB, {limit}, max SM {row.get('max_sm_clock_mhz')} MHz, "
            f"persistence {row.get('persistence_mode')}"
        )
        groups[key] = groups.get(key, 0) + 1
    return "; ".join(f"{count} x {key}" for key, count in groups.items())
