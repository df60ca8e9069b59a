"""What the simulated GPUs report besides memory: clocks, temperature, power, utilisation and clock event reasons.

A serving engine notes its activity in `<state dir>/activity/<pid>.json` (at most twice a second): when it last ran
a step, and whether it is throttled (SIMHOST_THROTTLE_AFTER_S). nvidia-smi reads these notes, so the clocks it
reports drop by the same factor the engine's steps slow down, with the thermal reasons set, as a real H200 would.
Values at idle are those of ../shared/reference/nvidia-smi-h200.md.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simhost import gpu, knobs

MAX_SM_MHZ = 1980
IDLE_SM_MHZ = 405
MEM_MHZ = 3201
POWER_LIMIT_W = 700.0
ACTIVE_WITHIN_S = 1.5
NOTE_EVERY_S = 0.5
IDLE, SW_THERMAL, HW_THERMAL = 0x1, 0x20, 0x40


def activity_dir(env: Mapping[str, str] | None = None) -> Path:
    return knobs.state_dir(env) / "activity"


class ActivityNote:
    """The engine's side: note activity and throttling for the GPUs this process serves."""

    def __init__(self, gpus: list[int]) -> None:
        self.gpus = gpus
        self.path = activity_dir() / f"{os.getpid()}.json"
        self.last = 0.0
        self.throttled = False

    def note(self, throttled: bool, factor: float, *, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if now - self.last < NOTE_EVERY_S and throttled == self.throttled:
            return
        self.last, self.throttled = now, throttled
        entry = {
            "pid": os.getpid(),
            "start_time": gpu.process_start_time(os.getpid()),
            "gpus": self.gpus,
            "active_at": now,
            "throttled": throttled,
            "throttle_factor": factor,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry))
        tmp.replace(self.path)


def _notes(env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    folder = activity_dir(env)
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        start = gpu.process_start_time(int(entry.get("pid", 0)))
        if start is not None and entry.get("start_time") in (None, start):
            out.append(entry)
        else:
            path.unlink(missing_ok=True)
    return out


def gpu_states(used: Mapping[int, int], *, now: float | None = None) -> dict[int, dict[str, Any]]:
    """Per GPU index: sm_mhz, mem_mhz, max_sm_mhz, temperature, power, power_limit, util, mem_util, reasons, pstate."""
    now = time.time() if now is None else now
    notes = _notes()
    states = {}
    for index in range(gpu.gpu_count()):
        mine = [n for n in notes if index in n.get("gpus", [])]
        throttled = [n for n in mine if n.get("throttled")]
        active = any(now - float(n.get("active_at", 0)) < ACTIVE_WITHIN_S for n in mine)
        holds = bool(used.get(index))
        sm = MAX_SM_MHZ if (holds or active) else IDLE_SM_MHZ
        # A GPU with a CUDA context open runs at full clocks with no reason set, busy or not (a real H200 with
        # driver 580 did); only a GPU nobody holds reports "idle".
        reasons = 0x0 if (holds or active) else IDLE
        temperature, power = (36, 123.84) if not holds else (41, 160.0)
        util = mem_util = 0
        if active:
            temperature, power, util, mem_util = 55, 455.0, 97, 38
        if throttled:
            factor = max(float(throttled[0].get("throttle_factor") or 1.0), 1.0)
            sm = int(round(MAX_SM_MHZ / factor / 15) * 15)  # clocks move in 15 MHz steps
            reasons |= SW_THERMAL | HW_THERMAL
            temperature, power = 89, min(power, 480.0)
        states[index] = {
            "sm_mhz": sm,
            "mem_mhz": MEM_MHZ,
            "max_sm_mhz": MAX_SM_MHZ,
            "temperature": temperature,
            "power": power,
            "power_limit": POWER_LIMIT_W,
            "util": util,
            "mem_util": mem_util,
            "reasons": reasons,
            "pstate": "P0",
        }
    return states
