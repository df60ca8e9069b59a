"""Adaptive speculation (`--speculative-adaptive`) and simulated acceptance (`SGLANG_SIMULATE_ACC_LEN`): SGLang's
resolution rules and errors, its step rule per batch-size slot, the simulated accept length, and a served
server whose speed (on the simulated GPU's own clock) and reported acceptance follow them."""

from __future__ import annotations

import asyncio
import json
import random
import re

import aiohttp
import pytest

from simhost import adaptive, speed
from simhost import args as sargs

from .conftest import DRAFT, EAGLE3_2STEP, TARGET, e2e_histogram

ERA_C = {"SIMHOST_SGLANG_VERSION": "0.5.23"}
# No sleeps, no noise: the simulated GPU's clock is then exactly the speed model's.
EXACT = {"SIMHOST_SPEED": "0", "SIMHOST_NOISE": "0", "SIMHOST_LAUNCH_NOISE": "0", **ERA_C}
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT]


def _resolve(*flags: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return sargs.resolve(["--model-path", TARGET, *flags], {**ERA_C, **(env or {})})


# -- resolution (main process)
def test_it_defaults_to_the_middle_candidate_of_sglangs_default_config_with_topk_1():
    args, warnings = _resolve(*EAGLE3, "--speculative-adaptive")
    assert args.speculative_adaptive is True
    # The default config's candidates are [0, 1, 3, 5, 7]: the middle one, draft tokens following it.
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (3, 1, 4)
    assert not any("adaptive" in w for w in warnings)


def test_it_refuses_steps_outside_the_candidates(tmp_path):
    config = tmp_path / "adaptive.json"
    config.write_text(json.dumps({"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1]}}))
    flags = [*EAGLE3, "--speculative-adaptive", "--speculative-adaptive-config", str(config)]
    with pytest.raises(ValueError) as error:
        _resolve(*flags, "--speculative-num-steps", "2")
    assert str(error.value) == (
        "--speculative-num-steps=2 is not in the adaptive config candidate_steps [0, 1, 3]. Pass one of those values."
    )
    args, _ = _resolve(*flags, "--speculative-num-steps", "3")
    assert (args.speculative_num_steps, args.speculative_num_draft_tokens) == (3, 4)


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (
            [*EAGLE3, "--speculative-num-steps", "2", "--speculative-eagle-topk", "2",
             "--speculative-num-draft-tokens", "4"],
            "speculative_eagle_topk=2 (only topk=1 is supported)",
        ),
        (
            ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", DRAFT],
            "speculative_algorithm=STANDALONE (only EAGLE/EAGLE3 are supported)",
        ),
        (
            [*EAGLE3, "--enable-dp-attention"],
            "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)",
        ),
        (
            [*EAGLE3, "--enable-two-batch-overlap"],
            "enable_two_batch_overlap=True is not supported (adaptive state swap would discard the TboAttnBackend "
            "wrapper)",
        ),
    ],
)  # fmt: skip
def test_it_falls_back_to_static_speculation_with_sglangs_reason(flags, reason):
    args, warnings = _resolve(*flags, "--speculative-adaptive")
    assert args.speculative_adaptive is False
    assert f"speculative_adaptive disabled: {reason}. Falling back to static speculative params." in warnings


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "speculative adaptive config must be a JSON object, got list"),
        ('{"1": {"candidate_steps": [1, -1]}}',
         "BS 1: candidate_steps must be a list of non-negative ints, got [1, -1]"),
        ('{"1": {"candidate_steps": []}}', "BS 1: candidate_steps must be a list of non-negative ints, got []"),
        ('{"1": {"candidate_steps": [1.5]}}', "BS 1: candidate_steps must be a list of non-negative ints, got [1.5]"),
        (
            '{"ema_alpha": 0.3}',
            "speculative_adaptive_config must contain at least one integer-string BS key, e.g. "
            "{\"1\": {\"candidate_steps\": [1,3,7]}}. Got keys: ['ema_alpha']",
        ),
    ],
)  # fmt: skip
def test_it_rejects_a_bad_config_with_sglangs_words(tmp_path, text, message):
    config = tmp_path / "adaptive.json"
    config.write_text(text)
    with pytest.raises(ValueError) as error:
        _resolve(*EAGLE3, "--speculative-adaptive", "--speculative-adaptive-config", str(config))
    assert str(error.value) == message


def test_it_has_no_adaptive_flag_before_era_c():
    with pytest.raises(SystemExit) as exit_:
        sargs.resolve(["--model-path", TARGET, *EAGLE3, "--speculative-adaptive"], {"SIMHOST_SGLANG_VERSION": "0.5.9"})
    assert exit_.value.code == 2


# -- the step rule
def test_a_slot_moves_its_steps_towards_round_ema_plus_one():
    slot = adaptive.StepSlot(3, {"candidate_steps": [1, 3, 5, 7], "warmup_batches": 2, "update_interval": 1})
    history = []
    for accepted in [6] * 20 + [0] * 30:
        slot.update([accepted])
        history.append(slot.steps)
    assert history[:2] == [3, 3]  # warm-up: no decision
    changes = [s for i, s in enumerate(history) if i == 0 or s != history[i - 1]]
    assert changes == [3, 5, 7, 5, 3, 1]  # up while drafts are accepted beyond the probe, down when none are
    capped = adaptive.StepSlot(3, {"candidate_steps": [1, 3, 5, 7], "warmup_batches": 0, "update_interval": 1})
    for _ in range(50):
        capped.update([4])  # an EMA of 4 probes 5, never 7 (that needs more than 4.5)
    assert capped.steps == 5


def test_a_slot_at_zero_steps_probes_the_next_candidate_up():
    slot = adaptive.StepSlot(0, {"candidate_steps": [0, 1], "warmup_batches": 0, "update_interval": 1})
    assert slot.update([0]) is True
    assert slot.steps == 1


def test_a_batch_is_padded_to_its_cuda_graph_then_routed_to_the_slot_below():
    cfg = {"1": {"candidate_steps": [3]}, "4": {"candidate_steps": [1]}, "16": {"candidate_steps": [0]}}
    routes = adaptive.AdaptiveSteps(cfg, 3, cuda_graph_bs=[1, 2, 4, 8, 16])
    assert [routes.steps_for_batch(bs) for bs in (1, 2, 3, 4, 9, 40)] == [3, 3, 1, 1, 0, 0]
    no_graphs = adaptive.AdaptiveSteps(cfg, 3, cuda_graph_bs=None)
    assert no_graphs.steps_for_batch(3) == 3  # without graphs there is no padding


# -- simulated acceptance
def test_match_expected_draws_floor_or_ceil_with_the_set_mean():
    sim = adaptive.SimulatedAcceptance(2.4, "match-expected")
    rng = random.Random(1)
    draws = [sim.draw(rng, 3) for _ in range(20000)]
    assert set(draws) == {2, 3}
    assert abs(sum(draws) / len(draws) - 2.4) < 0.02
    assert {sim.draw(rng, 2) for _ in range(50)} == {2}  # capped at what a step can accept + 1


def test_multinomial_rounds_a_clamped_normal_draw():
    sim = adaptive.SimulatedAcceptance(2.0, "multinomial")
    rng = random.Random(2)
    draws = [sim.draw(rng, 3) for _ in range(5000)]
    assert set(draws) == {1, 2, 3}


def test_it_reads_the_environment_as_sglang_does():
    assert adaptive.SimulatedAcceptance.from_env({}, "match-expected") is None
    assert adaptive.SimulatedAcceptance.from_env({"SGLANG_SIMULATE_ACC_LEN": "-1"}, "match-expected") is None
    sim = adaptive.SimulatedAcceptance.from_env({"SGLANG_SIMULATE_ACC_LEN": "2.5"}, "match-expected")
    assert sim == adaptive.SimulatedAcceptance(2.5, "match-expected", "fixed")
    bogus = adaptive.SimulatedAcceptance(2.5, "bogus")
    assert bogus.error == "Invalid simulate_acc_method: bogus"
    with pytest.raises(ValueError):
        adaptive.SimulatedAcceptance.from_env({"SGLANG_SIMULATE_ACC_LEN": "two"}, "match-expected")


# -- served
async def _generate(http: aiohttp.ClientSession, first: int, tokens: int = 128) -> dict:
    body = {"input_ids": list(range(first, first + 128)), "sampling_params": {"max_new_tokens": tokens}}
    async with http.post("/generate", json=body) as response:
        return await response.json()


async def _metric(http: aiohttp.ClientSession, name: str) -> float:
    async with http.get("/metrics") as response:
        text = await response.text()
    return float(re.search(rf"^sglang:{name}{{[^}}]*}} (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]


@pytest.mark.parametrize("length", [1.0, 3.0])
async def test_speed_and_reported_acceptance_follow_the_simulated_accept_length(launch, length):
    env = {**EXACT, "SGLANG_SIMULATE_ACC_LEN": str(length)}
    server = launch(*EAGLE3_2STEP, "--enable-metrics", env=env)
    server.wait_ready()
    async with aiohttp.ClientSession(server.base) as http:
        before = await e2e_histogram(http)
        answer = await _generate(http, 7)
        after = await e2e_histogram(http)
        assert await _metric(http, "spec_accept_length") == length
        assert await _metric(http, "spec_num_steps") == 2

    meta = answer["meta_info"]
    iterations = -(-127 // int(length))  # every verify step emits exactly the set length, the last one cut
    assert meta["spec_verify_ct"] == iterations
    # The simulated GPU's clock: one prefill and the iterations of a 2-step EAGLE3 server, nothing else.
    cfg = speed.SpecConfig.from_server_args(_resolve(*EAGLE3_2STEP)[0])
    params = speed.SpeedParams()
    expected = (speed.prefill_ms(params, cfg, 128) + iterations * speed.iteration_ms(params, cfg, 1)) / 1000
    assert after[0] - before[0] == pytest.approx(expected, rel=1e-6)
    # Fixed token mode: everything a verify step accepts is one token id, as SGLang writes it.
    assert set(answer["output_ids"][1:]) == {adaptive.FIXED_TOKEN_ID}


async def test_a_misconfigured_simulation_fails_the_first_verify(launch):
    env = {**EXACT, "SGLANG_SIMULATE_ACC_LEN": "2", "SGLANG_SIMULATE_ACC_METHOD": "bogus"}
    server = launch(*EAGLE3_2STEP, env=env)
    server.wait_for(r"ValueError: Invalid simulate_acc_method: bogus")
    server.wait_for(r"Scheduler hit an exception: Traceback")
    assert server.proc.wait(30) in (-9, 137)


async def test_the_active_steps_move_with_the_batch_size(launch, tmp_path):
    config = tmp_path / "adaptive.json"
    fast = {"warmup_batches": 2, "update_interval": 1}
    config.write_text(json.dumps({"1": {"candidate_steps": [1, 3], **fast}, "4": {"candidate_steps": [0]}}))
    # Real sleeps (ten times the GPU's speed), so the four requests of the crowd are running together.
    env = {**EXACT, "SIMHOST_SPEED": "10", "SGLANG_SIMULATE_ACC_LEN": "4", "EAGLE3_PROFILE": "1"}
    flags = [*EAGLE3, "--speculative-adaptive", "--speculative-adaptive-config", str(config)]
    server = launch(*flags, "--speculative-num-steps", "1", "--enable-metrics", "--decode-log-interval", "1", env=env)
    server.wait_ready()
    async with aiohttp.ClientSession(server.base) as http:
        solo = await _generate(http, 1, 64)
        assert await _metric(http, "spec_num_steps") == 3  # every draft accepted at 1 step: it probes 3
        assert await _metric(http, "spec_num_draft_tokens") == 4
        mark = len(server.text())
        crowd = await asyncio.gather(*(_generate(http, 1000 * i, 400) for i in range(1, 5)))

    log = server.text()
    assert "AdaptiveSpeculativeParams initialized: steps=1, candidate_steps=[1, 3]" in log
    assert "Adaptive spec params updated: steps 1 -> 3" in log
    assert solo["meta_info"]["spec_accept_length"] > 3.0  # 4 tokens a step once at 3 steps
    steps_by_batch = {
        (int(bs), int(steps))
        for bs, steps in re.findall(r"EAGLE3 profile: step=\d+ bs=(\d+) draft: \S+ ms \((\d+) steps\)", log[mark:])
    }
    assert (4, 0) in steps_by_batch  # four running: the "4" slot, no speculation
    assert all(steps == (0 if bs >= 4 else 3) for bs, steps in steps_by_batch)
    for answer in crowd:
        assert answer["meta_info"]["spec_verify_ct"] > 0
