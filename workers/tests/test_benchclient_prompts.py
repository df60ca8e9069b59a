"""The benchmark client with a sampled prompt set against the simulated host: per-request and per-category results,
outputs kept at temperature 0, prompt-dependent acceptance, and the draft_bug fault changing a candidate's outputs."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.analysis.equivalence import check_outputs
from experiments.formats.prompt_sampling import Conversation, sample, sample_bytes
from simhost import acceptance
from simhost.tests.conftest import EAGLE3_2STEP, launch, state_dir  # noqa: F401  (fixtures)
from workers.benchclient.client import BenchConfig, run_benchmark

CODE = "def add(a, b): return a + b  # fix this python function so that it handles strings too"
CHAT = "tell me about the history of the roman empire and why it fell in a few short paragraphs"
FAST = {"SIMHOST_SPEED": "0", "SIMHOST_ACCEPT_SPREAD": "0"}


def _prompts_file(tmp_path: Path) -> Path:
    conversations = [Conversation((f"{CODE} variant {i}", " ".join(["word"] * 40)), "code") for i in range(6)] + [
        Conversation((f"{CHAT} version {i}", " ".join(["word"] * 40)), "chat") for i in range(6)
    ]
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(sample_bytes(sample(conversations, 12, 1, input_cap=64, output_cap=24)))
    return path


async def _bench(server, prompts: Path) -> dict:
    config = BenchConfig(
        base_url=server.base, concurrency=4, num_prompts=12, prompts_file=str(prompts), keep_outputs=True
    )
    result, code = await run_benchmark(config)
    assert code == 0 and result["completed"] == 12, result
    return result


def test_it_makes_acceptance_depend_on_the_prompt():
    assert acceptance.prompt_factor(None) == 1.0
    assert acceptance.prompt_factor(CODE) == acceptance.prompt_factor(CODE)
    assert min(acceptance.prompt_factor(f"{CODE} {i}") for i in range(50)) > max(
        acceptance.prompt_factor(f"{CHAT} {i}") for i in range(50)
    )
    assert len({round(acceptance.prompt_factor(f"{CHAT} {i}"), 6) for i in range(20)}) > 10


async def test_it_reports_per_prompt_and_per_category_results_and_catches_a_draft_bug(launch, tmp_path):  # noqa: F811
    prompts = _prompts_file(tmp_path)
    # Each server on a GPU of its own, as on a real host: on one they race for its memory at start-up.
    baseline = launch(env={**FAST, "CUDA_VISIBLE_DEVICES": "0"})
    honest = launch(*EAGLE3_2STEP, env={**FAST, "CUDA_VISIBLE_DEVICES": "1"})
    buggy = launch(
        *EAGLE3_2STEP,
        env={**FAST, "CUDA_VISIBLE_DEVICES": "2", "SIMHOST_FAULTS": "draft_bug", "SIMHOST_DRAFT_BUG_AFTER": "5"},
    )
    for server in (baseline, honest, buggy):
        server.wait_ready()

    base, good, bad = [await _bench(s, prompts) for s in (baseline, honest, buggy)]

    sent = [json.loads(line) for line in prompts.read_text().splitlines()]
    assert [r["index"] for r in base["requests"]] == [p["index"] for p in sent]
    assert base["total_output_tokens"] == sum(p["output_len"] for p in sent)
    assert set(good["categories"]) == {"code", "chat"}
    assert good["categories"]["code"]["accept_length"] > good["categories"]["chat"]["accept_length"]
    assert base["categories"]["code"]["accept_length"] is None
    assert all(r["accept_length"] and r["accept_length"] > 1 for r in good["requests"])

    base_out = [r["output_ids"] for r in base["requests"]]
    assert all(len(ids) == p["output_len"] for ids, p in zip(base_out, sent, strict=True))
    assert [r["output_ids"] for r in good["requests"]] == base_out
    for ours, theirs in zip(bad["requests"], base["requests"], strict=True):
        assert ours["output_ids"][:5] == theirs["output_ids"][:5]
        assert ours["output_ids"][5] != theirs["output_ids"][5]


async def test_it_flips_a_few_outputs_late_like_float_non_determinism_and_the_gate_reports_it(launch, tmp_path):  # noqa: F811
    conversations = [Conversation((f"{CHAT} take {i}", " ".join(["word"] * 200)), "chat") for i in range(12)]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(sample_bytes(sample(conversations, 12, 1, input_cap=64, output_cap=140)))
    baseline = launch(env={**FAST, "CUDA_VISIBLE_DEVICES": "0"})  # a GPU each (see above)
    honest = launch(*EAGLE3_2STEP, env={**FAST, "CUDA_VISIBLE_DEVICES": "1", "SIMHOST_NONDETERMINISM": "0.3"})
    for server in (baseline, honest):
        server.wait_ready()

    base, ours = [await _bench(s, prompts) for s in (baseline, honest)]

    gate = check_outputs(
        {r["index"]: r["output_ids"] for r in base["requests"]}, {r["index"]: r["output_ids"] for r in ours["requests"]}
    )
    assert 0 < len(gate.late) < 12 and not gate.early and not gate.outputs_differ
    assert all(acceptance.FLIP_FROM <= d.token < acceptance.FLIP_FROM + acceptance.FLIP_SPAN for d in gate.late)
