"""Opt-in: the benchmark client's vLLM backend and the real `sglang.bench_serving --backend vllm` agree against one
simulated vLLM server (`python -m simhost.vllm_serve`) at concurrency 4: the same output tokens, output throughput
within 2%. Skipped unless SIMHOST_BENCH_VENV names a venv holding sglang (simhost/README.md "Real SGLang client"),
as workers/tests/test_bench_serving_agreement.py is for SGLang's own backends.

bench_serving's vllm backend posts to /v1/completions like its sglang-oai one, without `stream_options`: it counts
each request's requested output length, which with ignore_eos is what the server generates. On a speculative server
both clients send bench_serving's very random-ids prompts (the client reads them from a prompts file), since a
speculative server accepts drafts by prompt; on a baseline each client sends its own random ids."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simhost.tests.conftest import BENCH_SERVING, MODELS, REPO, Server
from workers.benchclient.client import BenchConfig, run_benchmark
from workers.tests.test_benchclient_vllm import EAGLE3_K3, start_vllm, stop_vllm

VENV = os.environ.get("SIMHOST_BENCH_VENV", "")
pytestmark = pytest.mark.skipif(
    not (VENV and (Path(VENV) / "bin" / "python").exists()), reason="SIMHOST_BENCH_VENV not set (opt-in)"
)
TOKENIZER = str(MODELS / "kimi-k2.5-sim" / "tokenizer")
PROMPTS, CONCURRENCY, SEED, LENGTH = 8, 4, 1, 128
VENV_ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
RANDOM_IDS = ["--dataset-name", "random-ids", "--random-input-len", str(LENGTH), "--random-output-len", str(LENGTH),
              "--random-range-ratio", "1.0"]  # fmt: skip


@pytest.fixture
def vllm_server(tmp_path: Path) -> Iterator[Any]:
    """Start simhost's vLLM (the newest profile) with the given flags; every server started is stopped after."""
    servers: list[Server] = []

    def _start(*flags: str) -> Server:
        servers.append(start_vllm(tmp_path, *flags, version="0.33.0"))
        return servers[-1]

    yield _start
    for server in servers:
        stop_vllm(server)


def _bench_serving(server: Server, tmp_path: Path, *source: str) -> dict[str, Any]:
    out = tmp_path / "out.jsonl"
    argv = [
        str(Path(VENV) / "bin" / "python"), BENCH_SERVING, "--backend", "vllm", "--base-url", server.base,
        *source, "--tokenizer", TOKENIZER, "--num-prompts", str(PROMPTS), "--max-concurrency", str(CONCURRENCY),
        "--seed", str(SEED), "--output-file", str(out), "--disable-tqdm",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=VENV_ENV, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(out.read_text().splitlines()[-1]))


def _assert_agree(ours: dict[str, Any], code: int, theirs: dict[str, Any]) -> None:
    assert code == 0 and ours["completed"] == theirs["completed"] == PROMPTS
    assert ours["total_input_tokens"] == theirs["total_input_tokens"] == PROMPTS * LENGTH
    assert ours["total_output_tokens"] == theirs["total_output_tokens"] == PROMPTS * LENGTH
    assert ours["output_throughput"] == pytest.approx(theirs["output_throughput"], rel=0.02), (ours, theirs)


def test_it_agrees_with_bench_serving_on_a_baseline_vllm(vllm_server, tmp_path):
    # Each client its own random ids: a baseline server's steps cost the same whatever the ids are.
    server = vllm_server()

    theirs = _bench_serving(server, tmp_path, *RANDOM_IDS)
    config = BenchConfig(
        server.base, backend="vllm", concurrency=CONCURRENCY, num_prompts=PROMPTS, input_len=LENGTH,
        output_len=LENGTH, seed=SEED,
    )  # fmt: skip
    ours, code = asyncio.run(run_benchmark(config))

    _assert_agree(ours, code, theirs)
    assert ours["pooled_accept_length"] is None


def test_it_agrees_with_bench_serving_on_its_random_ids_served_speculatively(vllm_server, tmp_path):
    sampler = [str(Path(VENV) / "bin" / "python"), str(REPO / "simhost" / "tools" / "bench_serving_random_ids.py")]
    drawn = subprocess.run(
        [*sampler, TOKENIZER, str(SEED), str(PROMPTS), str(LENGTH)],
        capture_output=True, text=True, timeout=120, env=VENV_ENV, check=True,
    )  # fmt: skip
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(drawn.stdout)
    server = vllm_server(*EAGLE3_K3)

    theirs = _bench_serving(server, tmp_path, *RANDOM_IDS)
    config = BenchConfig(
        server.base, backend="vllm", concurrency=CONCURRENCY, num_prompts=PROMPTS, prompts_file=str(prompts)
    )
    ours, code = asyncio.run(run_benchmark(config))

    _assert_agree(ours, code, theirs)
    assert ours["pooled_accept_length"] > 1
