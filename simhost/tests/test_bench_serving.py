"""Opt-in: the real `sglang.bench_serving` (an SGLang 0.5.x wheel: 0.5.9, 0.5.23) against simhost. Skipped unless
SIMHOST_BENCH_VENV names a venv holding it (README "Real SGLang client"); never touches the project venv."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import BENCH_SERVING, EAGLE3_2STEP, MODELS

VENV = os.environ.get("SIMHOST_BENCH_VENV", "")
pytestmark = pytest.mark.skipif(
    not (VENV and (Path(VENV) / "bin" / "python").exists()), reason="SIMHOST_BENCH_VENV not set (opt-in)"
)
TOKENIZER = str(MODELS / "kimi-k2.5-sim" / "tokenizer")


@pytest.mark.parametrize("backend", ["sglang", "sglang-oai", "sglang-oai-chat"])
def test_bench_serving_runs_against_simhost(launch, tmp_path, backend):
    server = launch("--tp", "2", *EAGLE3_2STEP)
    server.wait_ready()
    argv = [
        str(Path(VENV) / "bin" / "python"), BENCH_SERVING, "--backend", backend,
        "--base-url", server.base, "--dataset-name", "random-ids", "--tokenizer", TOKENIZER,
        "--num-prompts", "4", "--random-input-len", "32", "--random-output-len", "32", "--random-range-ratio", "1.0",
        "--max-concurrency", "1", "--output-file", str(tmp_path / "out.jsonl"), "--disable-tqdm",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "============ Serving Benchmark Result ============" in out.stdout
    assert re.search(r"^Successful requests:\s+4\s*$", out.stdout, re.M)
    assert re.search(r"^Total generated tokens:\s+128\s*$", out.stdout, re.M)
    assert re.search(r"^Total generated tokens \(retokenized\):\s+128\s*$", out.stdout, re.M)
    accept = re.search(r"^Accept length:\s+([\d.]+)\s*$", out.stdout, re.M)
    assert accept and 1.5 < float(accept.group(1)) < 2.5
