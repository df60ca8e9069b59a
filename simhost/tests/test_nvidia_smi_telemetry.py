"""The nvidia-smi shim answers the queries specdash samples exactly as driver 580 does on a real H200
(../shared/reference/nvidia-smi-h200.md), and reports a throttled server's GPUs with lower clocks and the thermal
reasons."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator

from simhost import telemetry

from .conftest import NVIDIA_SMI

REAL_PERFORMANCE = (
    "$ nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,power.limit,"
    "utilization.gpu,utilization.memory,clocks_throttle_reasons.active,clocks_event_reasons.active,pstate "
    "--format=csv",
    "index, clocks.current.sm [MHz], clocks.current.memory [MHz], clocks.max.sm [MHz], temperature.gpu, "
    "power.draw [W], power.limit [W], utilization.gpu [%], utilization.memory [%], clocks_event_reasons.active, "
    "clocks_event_reasons.active, pstate",
    "0, 405 MHz, 3201 MHz, 1980 MHz, 36, 123.84 W, 700.00 W, 0 %, 0 %, 0x0000000000000001, 0x0000000000000001, P0",
)
REAL_DETAILS = (
    "$ nvidia-smi --query-gpu=driver_version,vbios_version,pci.bus_id,compute_mode,persistence_mode --format=csv",
    "driver_version, vbios_version, pci.bus_id, compute_mode, persistence_mode",
    "580.159.04, 96.00.A5.00.1A, 00000000:00:06.0, Default, Enabled",
)


def _smi(command: str, env: dict[str, str]) -> list[str]:
    argv = [NVIDIA_SMI, *command.removeprefix("$ nvidia-smi ").split()]
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=True, timeout=30).stdout.splitlines()


def _env(tmp_path) -> dict[str, str]:
    return {**os.environ, "SIMHOST_STATE_DIR": str(tmp_path), "SIMHOST_GPUS": "1"}


def test_it_answers_the_reference_queries_like_the_real_driver(tmp_path):
    env = _env(tmp_path)
    command, header, row = REAL_PERFORMANCE
    assert _smi(command, env) == [header, row]
    command, header, row = REAL_DETAILS
    header_seen, row_seen = _smi(command, env)
    assert header_seen == header
    # The PCI address is where the simulated card sits; everything else is the real host's.
    assert row_seen.split(", ")[:2] + row_seen.split(", ")[3:] == row.split(", ")[:2] + row.split(", ")[3:]


def test_it_reports_a_throttled_servers_gpu_with_low_clocks_and_thermal_reasons(tmp_path, monkeypatch):
    env = _env(tmp_path)
    monkeypatch.setenv("SIMHOST_STATE_DIR", str(tmp_path))
    query = "--query-gpu=index,clocks.sm,clocks_throttle_reasons.active,utilization.gpu --format=csv,noheader,nounits"
    note = telemetry.ActivityNote([0])  # this process stands for the server: the note lives as long as it does
    with _serving(note, throttled=False):
        assert _smi(query, env) == ["0, 1980, 0x0000000000000000, 97"]  # busy at full clocks: no reason at all
    with _serving(note, throttled=True):
        assert _smi(query, env) == ["0, 1320, 0x0000000000000060, 97"]


@contextlib.contextmanager
def _serving(note: telemetry.ActivityNote, *, throttled: bool) -> Iterator[None]:
    """Step as an engine does while nvidia-smi answers: it notes its activity all along (a single note made before
    a slow start of nvidia-smi on a loaded machine would have aged into "idle")."""
    done = threading.Event()

    def steps() -> None:
        while not done.is_set():
            note.note(throttled, 1.5)
            done.wait(0.05)

    note.note(throttled, 1.5)
    thread = threading.Thread(target=steps, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
