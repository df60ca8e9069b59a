"""simhost/tools/bench_serving.py runs `sglang.bench_serving` as `python -m` would, without the module that would
load SGLang's CUDA kernels: checked against a stand-in sglang package, so it needs no venv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import BENCH_SERVING

# What 0.5.23's client does at import: take the constant from the GPU-side module, then run its CLI.
_CLIENT = """import sys
from sglang.srt.disaggregation.utils import FAKE_BOOTSTRAP_HOST

if __name__ == "__main__":
    print(FAKE_BOOTSTRAP_HOST, sys.argv[1:])
"""


def test_it_runs_the_client_with_its_arguments_and_without_the_gpu_module(tmp_path: Path) -> None:
    package = tmp_path / "sglang"
    # No srt/disaggregation/: importing the real module is what a CPU-only venv cannot do.
    (package / "srt").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "srt" / "__init__.py").write_text("")
    (package / "bench_serving.py").write_text(_CLIENT)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    done = subprocess.run(
        [sys.executable, BENCH_SERVING, "--backend", "sglang", "--num-prompts", "4"],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2.2.2.2 ['--backend', 'sglang', '--num-prompts', '4']"


def test_it_fails_as_python_m_would_without_sglang(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, BENCH_SERVING, "--help"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode != 0 and "sglang" in done.stderr
