"""bench/gpu_host_check.py runs with the standard library alone (no site-packages, so no Django), here against the
simulated nvidia-smi; without PyTorch it skips the teardown check and says why."""

from __future__ import annotations

import os
import subprocess
import sys

from simhost.hostsetup import REPO


def test_it_checks_a_host_with_the_standard_library_alone(tmp_path):
    env = {
        "PATH": f"{REPO / 'simhost' / 'bin'}:{os.environ['PATH']}",
        "SIMHOST_STATE_DIR": str(tmp_path),
        "SIMHOST_GPUS": "2",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            str(REPO / "bench" / "gpu_host_check.py"),
            "--local",
            "--python",
            f"{sys.executable} -S",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "GPUs        2 x NVIDIA H200, 143771 MiB, 700 W limit, max SM 1980 MHz, persistence Enabled" in done.stdout
    assert "GPU 1: SM 405 MHz, memory 3201 MHz, 36 C, 123.84 W, util 0%, 0 MiB used, reasons idle" in done.stdout
    assert "SKIPPED: " in done.stdout and "it cannot import torch" in done.stdout
    assert done.stdout.rstrip().endswith("== fingerprint: ok, telemetry: ok, teardown: skipped")
