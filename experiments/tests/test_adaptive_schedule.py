"""The adaptive schedule built from a study's per-band winners (analysis.adaptive_schedule), and the launch policy
that lets a member run adaptive and simulated-acceptance servers (and nothing around them)."""

from __future__ import annotations

import json

import pytest

from experiments.analysis.adaptive_schedule import AdaptiveSchedule, BandWinner, build_adaptive_schedule
from experiments.rules.launch_policy import env_refusals, extra_args_refusals

DRAFT = "/models/kimi-k2.5-sim-eagle3"


def _band(low: int, high: int, steps: int | None, topk: int = 1, algorithm: str = "EAGLE3", draft: str = DRAFT):
    if steps is None:
        return BandWinner(low, high, "baseline")
    return BandWinner(low, high, f"s{steps}-k{topk}", algorithm, steps, topk, draft)


def test_it_writes_one_slot_per_band_holding_its_winner():
    schedule = build_adaptive_schedule([_band(8, 16, None), _band(1, 2, 2), _band(4, 4, 1)])
    assert schedule.is_exact
    assert schedule.config == {
        "1": {"candidate_steps": [2]},
        "4": {"candidate_steps": [1]},
        "8": {"candidate_steps": [0]},
    }
    assert (schedule.algorithm, schedule.draft_model_path, schedule.initial_steps) == ("EAGLE3", DRAFT, 2)
    text = schedule.to_json()
    assert json.loads(text) == schedule.config
    assert list(json.loads(text)) == ["1", "4", "8"]  # ordered by threshold, so versions diff cleanly


def test_it_says_what_a_topk_above_1_band_becomes():
    schedule = build_adaptive_schedule([_band(1, 2, 2, topk=4), _band(4, 8, 1)])
    assert not schedule.is_exact
    assert schedule.config == {"1": {"candidate_steps": [2]}, "4": {"candidate_steps": [1]}}
    (note,) = schedule.notes
    assert note.startswith("1 <= c <= 2: s2-k4 uses topk 4; SGLang's adaptive speculation runs topk 1 only")


def test_it_says_when_a_band_needs_another_algorithm_or_draft():
    other = _band(4, 4, 3, draft="/models/other-draft")
    schedule = build_adaptive_schedule([_band(1, 2, 2), other, _band(8, 8, 1)])
    assert schedule.config == {
        "1": {"candidate_steps": [2]},
        "4": {"candidate_steps": [2]},  # the server's own steps nearest to 3
        "8": {"candidate_steps": [1]},
    }
    (note,) = schedule.notes
    assert "c = 4: s3-k1 runs EAGLE3 with draft /models/other-draft" in note
    assert "one server runs EAGLE3 with draft /models/kimi-k2.5-sim-eagle3" in note


@pytest.mark.parametrize(
    ("bands", "words"),
    [
        ([_band(1, 16, None)], "No band speculates"),
        ([_band(1, 4, 2, algorithm="STANDALONE"), _band(8, 8, None)], "EAGLE and EAGLE3 only"),
    ],
)
def test_it_writes_nothing_it_cannot_serve(bands, words):
    schedule = build_adaptive_schedule(bands)
    assert schedule.config is None and words in schedule.notes[0]
    with pytest.raises(ValueError):
        AdaptiveSchedule(None).to_json()


def test_the_launch_policy_takes_adaptive_and_simulated_acceptance():
    assert extra_args_refusals(["--speculative-adaptive"]) == []
    env = {"SGLANG_SIMULATE_ACC_LEN": "2.5", "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
    assert env_refusals({**env, "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token"}) == []


@pytest.mark.parametrize(
    "env",
    [
        {"SGLANG_SIMULATE_ACC_LEN": "0.5"},
        {"SGLANG_SIMULATE_ACC_LEN": "40"},
        {"SGLANG_SIMULATE_ACC_LEN": "nan"},
        {"SGLANG_SIMULATE_ACC_LEN": "2.5; rm -rf /"},
        {"SGLANG_SIMULATE_ACC_METHOD": "bogus"},
        {"SGLANG_SIMULATE_ACC_TOKEN_MODE": "$(id)"},
    ],
)
def test_the_launch_policy_refuses_unbounded_or_unknown_simulation_values(env):
    assert env_refusals(env)


def test_a_member_never_names_the_adaptive_config_file():
    assert extra_args_refusals(["--speculative-adaptive-config", "/etc/passwd"])
    assert extra_args_refusals(["--speculative-adaptive", "yes"])  # a switch takes no value


def test_a_studys_bands_become_a_schedule_with_their_launch_differences_said():
    from experiments.rules import sweeps
    from experiments.tuning import recommend
    from experiments.tuning.plan import BASELINE
    from experiments.tuning.space import SearchSpace

    base = {"name": "eagle3", "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": DRAFT,
            "extra_args": [], "env": {}}  # fmt: skip
    sweep = sweeps.Sweep(steps=(1, 3), topk=(1,), env=(("NCCL_PROTO", ("LL", "Simple")),))
    space = SearchSpace.build(base, sweep)
    names = {name.split(" ")[0] + " " + name.split(" ")[1]: name for name in space.names}
    bands = [
        recommend.Band(1, 2, names["s3-k1-d4 NCCL_PROTO=LL"], []),
        recommend.Band(4, 4, names["s1-k1-d2 NCCL_PROTO=Simple"], []),
        recommend.Band(8, 16, BASELINE, []),
    ]
    schedule = build_adaptive_schedule(recommend.band_winners(bands, space))
    assert schedule.config == {
        "1": {"candidate_steps": [3]},
        "4": {"candidate_steps": [1]},
        "8": {"candidate_steps": [0]},
    }
    (note,) = schedule.notes
    assert note == (
        "c = 4: s1-k1-d2 NCCL_PROTO=Simple launches with NCCL_PROTO=Simple; one server launches with NCCL_PROTO=LL, "
        "so this band runs its steps with the server's."
    )
