"""The simulated draft checkpoints (models/kimi-k2.5-sim-specforge and its exports): each export serves at the
quality its config's multiplier gives, the one whose weights the serving loader skips accepts nothing, and the
training figure + 1 (the bonus token SpecForge's simulated accept length leaves out) is what a healthy export
serves at 3 steps, topk 1, concurrency 1."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from simhost import draft_quality

from .conftest import MODELS, TARGET
from .test_vllm_serve import start_vllm, stop

RUN = "kimi-k2.5-sim-eagle3-sf"
TRAINING = MODELS / "kimi-k2.5-sim-specforge"


def _export(step: int) -> Path:
    return MODELS / f"{RUN}-step{step}-sglang"


def _training_figure(step: int) -> float:
    lines = (TRAINING / f"{RUN}.eval_metrics.jsonl").read_text().splitlines()
    by_step = {row["step"]: row for row in map(json.loads, lines)}
    return float(by_step[step]["eval/simulated_acc_len"])


def test_it_reads_the_multiplier_within_its_bounds_and_one_without_it():
    assert draft_quality.acceptance_multiplier({"simhost_acceptance_multiplier": 0.88}) == 0.88
    assert draft_quality.acceptance_multiplier({}) == 1.0
    assert draft_quality.acceptance_multiplier(None) == 1.0
    assert draft_quality.acceptance_multiplier({"simhost_acceptance_multiplier": 9}) == 1.0
    assert draft_quality.acceptance_multiplier({"simhost_acceptance_multiplier": "0.5"}) == 1.0
    assert draft_quality.acceptance_multiplier({"simhost_acceptance_multiplier": True}) == 1.0


def test_it_tells_the_export_whose_weights_the_loader_skips(tmp_path):
    assert draft_quality.weights_skipped(str(_export(5000)))
    assert not draft_quality.weights_skipped(str(_export(4000)))
    assert not draft_quality.weights_skipped(str(MODELS / "kimi-k2.5-sim-eagle3"))
    assert not draft_quality.weights_skipped(str(tmp_path))  # no index: not judged
    assert not draft_quality.weights_skipped(None)


def test_the_training_curve_rises_then_plateaus_and_best_meta_names_its_top():
    figures = [_training_figure(step) for step in (1000, 2000, 3000, 4000, 5000)]
    assert figures[:4] == sorted(figures[:4]) and figures[4] < figures[3]
    assert figures[3] - figures[4] < 0.05  # a plateau, not a collapse
    meta = json.loads((TRAINING / f"{RUN}.best_meta.json").read_text())
    assert meta["step"] == 4000 and meta["score"] == figures[3] and meta["metric"] == "eval/simulated_acc_len"
    assert (TRAINING / f"{RUN}-best").readlink() == Path(f"{RUN}-step4000")
    assert (TRAINING / f"{RUN}-latest").readlink() == Path(f"{RUN}-step5000")


async def _served_accept_length(launch, draft: Path) -> float:
    flags = [
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft),
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    ]  # fmt: skip
    server = launch(*flags, env={"SIMHOST_SPEED": "0", "SIMHOST_SEED": "7"})
    server.wait_ready()
    lengths = []
    async with aiohttp.ClientSession(server.base) as http:
        for n in range(40):  # one at a time: concurrency 1; token ids: no prompt factor
            body = {"input_ids": list(range(1000 + 50 * n, 1030 + 50 * n)), "sampling_params": {"max_new_tokens": 200}}
            async with http.post("/generate", json=body) as response:
                lengths.append((await response.json())["meta_info"]["spec_accept_length"])
    return sum(lengths) / len(lengths)  # the per-request mean, as SpecForge's benchmark averages


@pytest.mark.parametrize("step", [2000, 4000])
async def test_a_healthy_export_serves_its_training_figure_plus_the_bonus_token(launch, step):
    served = await _served_accept_length(launch, _export(step))

    assert served == pytest.approx(_training_figure(step) + 1, abs=0.12)


async def test_the_export_whose_weights_are_skipped_serves_accept_length_one(launch):
    served = await _served_accept_length(launch, _export(5000))

    assert served == pytest.approx(1.0, abs=0.01)  # the prefill's token over ~200 verify steps
    assert _training_figure(5000) + 1 > 2.2  # while its training figure looks healthy


async def _vllm_accepted_share(tmp_path: Path, draft: Path) -> float:
    """Accepted draft tokens over drafted ones, by the simulated vLLM's /metrics, for `draft` as its eagle3 head."""
    spec = json.dumps({"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3})
    server = start_vllm(
        tmp_path,
        "-tp",
        "2",
        "--speculative-config",
        spec,
        env={"SIMHOST_VLLM_VERSION": "0.33.0", "SIMHOST_SPEED": "0", "SIMHOST_GPU_MEMORY_MIB": "700000"},
    )
    try:
        server.wait_for(r"^INFO:     Application startup complete\.$")
        async with aiohttp.ClientSession(server.base) as http:
            for n in range(10):
                body = {"model": TARGET, "prompt": [1000 + 40 * n + i for i in range(30)], "max_tokens": 100}
                async with http.post("/v1/completions", json=body) as response:
                    assert response.status == 200
            async with http.get("/metrics") as response:
                text = await response.text()
    finally:
        stop(server)

    def total(name: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))

    return total("vllm:spec_decode_num_accepted_tokens_total") / total("vllm:spec_decode_num_draft_tokens_total")


async def test_the_simulated_vllm_serves_the_same_qualities(tmp_path):
    healthy = await _vllm_accepted_share(tmp_path, _export(4000))
    broken = await _vllm_accepted_share(tmp_path, _export(5000))
    weaker = await _vllm_accepted_share(tmp_path, _export(2000))

    assert broken == 0.0
    assert healthy > weaker > 0.2


def test_only_the_export_that_kept_the_trainers_prefix_is_judged_skipped_among_the_shipped_models():
    """The rule is the trainer's prefix, not the EAGLE-3 head's key names: a DFlash drafter or a standalone LM loads
    keys of its own and serves as trained."""
    from simhost import draft_quality, hostsetup

    skipped = [d.name for d in sorted(hostsetup.MODELS_ROOT.iterdir()) if draft_quality.weights_skipped(str(d))]
    assert skipped == ["kimi-k2.5-sim-eagle3-sf-step5000-sglang"]
