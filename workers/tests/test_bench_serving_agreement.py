"""Opt-in: the benchmark client and the real `sglang.bench_serving` (SGLang 0.5.9) on the same ShareGPT sample
against one simulated host agree: the same output tokens, output throughput within 2%. Skipped unless
SIMHOST_BENCH_VENV names a venv holding sglang (simhost/README.md "Real SGLang client")."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from experiments.formats import prompt_sampling
from experiments.reads import prompt_store
from simhost.tests.conftest import MODELS, launch, state_dir  # noqa: F401  (fixtures)
from workers.benchclient.client import BenchConfig, run_benchmark

VENV = os.environ.get("SIMHOST_BENCH_VENV", "")
pytestmark = pytest.mark.skipif(
    not (VENV and (Path(VENV) / "bin" / "python").exists()), reason="SIMHOST_BENCH_VENV not set (opt-in)"
)
TOKENIZER = str(MODELS / "kimi-k2.5-sim" / "tokenizer")
PROMPTS, CONCURRENCY, SEED = 8, 4, 1
# Both clients on one server, one after the other: no per-step or per-launch noise, no prefix cache for the second.
QUIET = {"SIMHOST_NOISE": "0", "SIMHOST_LAUNCH_NOISE": "0"}


def test_it_agrees_with_bench_serving_on_a_sharegpt_sample(launch, tmp_path):  # noqa: F811
    sharegpt = prompt_store.sharegpt_conversations()
    # bench_serving reads ShareGPT with json.load, which the package's cut-off file defeats: it gets the very
    # conversations specdash read, in the same order, as a valid file.
    records = [
        {"id": str(i), "conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]}
        for i, (prompt, answer) in enumerate(c.turns[:2] for c in sharegpt.conversations)
    ]
    dataset = tmp_path / "sharegpt.json"
    dataset.write_text(json.dumps(records))
    # No caps: bench_serving keeps each answer's length as the output length.
    sample = prompt_sampling.sample(sharegpt.conversations, PROMPTS, SEED, input_cap=1 << 30, output_cap=1 << 30)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(prompt_sampling.sample_bytes(sample))
    server = launch("--disable-radix-cache", env=QUIET)
    server.wait_ready()

    out = tmp_path / "out.jsonl"
    argv = [
        str(Path(VENV) / "bin" / "python"), "-m", "sglang.bench_serving", "--backend", "sglang",
        "--base-url", server.base,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--tokenizer", TOKENIZER,
        "--num-prompts", str(PROMPTS), "--max-concurrency", str(CONCURRENCY), "--seed", str(SEED),
        "--output-file", str(out), "--disable-tqdm",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(out.read_text().splitlines()[-1])

    config = BenchConfig(server.base, concurrency=CONCURRENCY, num_prompts=PROMPTS, prompts_file=str(prompts))
    ours, code = asyncio.run(run_benchmark(config))

    assert code == 0 and ours["completed"] == theirs["completed"] == PROMPTS
    assert ours["total_input_tokens"] == theirs["total_input_tokens"]
    assert ours["total_output_tokens"] == theirs["total_output_tokens"] == sum(p.output_len for p in sample)
    assert ours["output_throughput"] == pytest.approx(theirs["output_throughput"], rel=0.02), (ours, theirs)
