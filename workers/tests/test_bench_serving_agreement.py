"""Opt-in: the benchmark client and the real `sglang.bench_serving` (SGLang 0.5.9 or 0.5.23) agree against one
simulated host, on a ShareGPT sample and on random ids at concurrency 4: the same output tokens, output throughput
within 2%. Skipped unless SIMHOST_BENCH_VENV names a venv holding sglang (simhost/README.md "Real SGLang client").

On random ids each client sends its own prompts, which a speculative server accepts differently (bench/README.md
"bench_serving_agreement.py"): the clients are compared there on bench_serving's very prompts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from experiments.formats import prompt_sampling
from experiments.models import prompt_store
from simhost.tests.conftest import (  # noqa: F401  (fixtures)
    BENCH_SERVING,
    EAGLE3_2STEP,
    MODELS,
    REPO,
    Server,
    launch,
    state_dir,
)
from workers.benchclient.client import BenchConfig, run_benchmark

VENV = os.environ.get("SIMHOST_BENCH_VENV", "")
pytestmark = pytest.mark.skipif(
    not (VENV and (Path(VENV) / "bin" / "python").exists()), reason="SIMHOST_BENCH_VENV not set (opt-in)"
)
TOKENIZER = str(MODELS / "kimi-k2.5-sim" / "tokenizer")
PROMPTS, CONCURRENCY, SEED, LENGTH = 8, 4, 1, 128
# Both clients on one server, one after the other: no per-step or per-launch noise, no prefix cache for the second.
QUIET = {"SIMHOST_NOISE": "0", "SIMHOST_LAUNCH_NOISE": "0"}
VENV_ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
RANDOM_IDS = ["--dataset-name", "random-ids", "--random-input-len", str(LENGTH), "--random-output-len", str(LENGTH),
              "--random-range-ratio", "1.0"]  # fmt: skip


def _bench_serving(server: Server, tmp_path: Path, *source: str) -> dict[str, Any]:
    out = tmp_path / "out.jsonl"
    argv = [
        str(Path(VENV) / "bin" / "python"), BENCH_SERVING, "--backend", "sglang", "--base-url", server.base,
        *source, "--tokenizer", TOKENIZER, "--num-prompts", str(PROMPTS), "--max-concurrency", str(CONCURRENCY),
        "--seed", str(SEED), "--output-file", str(out), "--disable-tqdm",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=VENV_ENV, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(out.read_text().splitlines()[-1]))


def test_it_agrees_with_bench_serving_on_a_sharegpt_sample(launch, tmp_path):  # noqa: F811
    sharegpt = prompt_store.sharegpt_conversations()
    dataset = tmp_path / "sharegpt.json"
    dataset.write_bytes(prompt_sampling.sharegpt_bytes(sharegpt.conversations))
    # No caps: bench_serving keeps each answer's length as the output length.
    sample = prompt_sampling.sample(sharegpt.conversations, PROMPTS, SEED, input_cap=1 << 30, output_cap=1 << 30)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(prompt_sampling.sample_bytes(sample))
    server = launch("--disable-radix-cache", env=QUIET)
    server.wait_ready()

    theirs = _bench_serving(server, tmp_path, "--dataset-name", "sharegpt", "--dataset-path", str(dataset))
    config = BenchConfig(server.base, concurrency=CONCURRENCY, num_prompts=PROMPTS, prompts_file=str(prompts))
    ours, code = asyncio.run(run_benchmark(config))

    assert code == 0 and ours["completed"] == theirs["completed"] == PROMPTS
    assert ours["total_input_tokens"] == theirs["total_input_tokens"]
    assert ours["total_output_tokens"] == theirs["total_output_tokens"] == sum(p.output_len for p in sample)
    assert ours["output_throughput"] == pytest.approx(theirs["output_throughput"], rel=0.02), (ours, theirs)


def test_it_agrees_with_bench_serving_on_random_ids(launch, tmp_path):  # noqa: F811
    # Each client its own random ids: a baseline server's steps cost the same whatever the ids are.
    server = launch("--disable-radix-cache", env=QUIET)
    server.wait_ready()

    theirs = _bench_serving(server, tmp_path, *RANDOM_IDS)
    config = BenchConfig(
        server.base, concurrency=CONCURRENCY, num_prompts=PROMPTS, input_len=LENGTH, output_len=LENGTH, seed=SEED
    )
    ours, code = asyncio.run(run_benchmark(config))

    assert code == 0 and ours["completed"] == theirs["completed"] == PROMPTS
    assert ours["total_input_tokens"] == theirs["total_input_tokens"] == PROMPTS * LENGTH
    assert ours["total_output_tokens"] == theirs["total_output_tokens"] == PROMPTS * LENGTH
    assert ours["output_throughput"] == pytest.approx(theirs["output_throughput"], rel=0.02), (ours, theirs)


def test_it_agrees_with_bench_serving_on_its_random_ids_served_speculatively(launch, tmp_path):  # noqa: F811
    # A speculative server accepts drafts by prompt: on bench_serving's own random-ids prompts, which the client
    # reads from a prompts file, both ask the same of it.
    sampler = [str(Path(VENV) / "bin" / "python"), str(REPO / "simhost" / "tools" / "bench_serving_random_ids.py")]
    drawn = subprocess.run(
        [*sampler, TOKENIZER, str(SEED), str(PROMPTS), str(LENGTH)],
        capture_output=True, text=True, timeout=120, env=VENV_ENV, check=True,
    )  # fmt: skip
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(drawn.stdout)
    server = launch("--disable-radix-cache", *EAGLE3_2STEP, env=QUIET)
    server.wait_ready()

    theirs = _bench_serving(server, tmp_path, *RANDOM_IDS)
    config = BenchConfig(server.base, concurrency=CONCURRENCY, num_prompts=PROMPTS, prompts_file=str(prompts))
    ours, code = asyncio.run(run_benchmark(config))

    assert code == 0 and ours["completed"] == theirs["completed"] == PROMPTS
    assert ours["total_input_tokens"] == theirs["total_input_tokens"] == PROMPTS * LENGTH
    assert ours["total_output_tokens"] == theirs["total_output_tokens"] == PROMPTS * LENGTH
    assert ours["output_throughput"] == pytest.approx(theirs["output_throughput"], rel=0.02), (ours, theirs)
