"""The sweep grid (pure): SGLang's rules applied and explained, names after values, bounds, and the estimate."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.rules import sweeps
from experiments.rules.sweeps import Sweep, SweepError, build_grid

BASE: dict[str, Any] = {
    "model_path": "/models/kimi-k2.5-sim",
    "speculative_algorithm": "EAGLE3",
    "speculative_draft_model_path": "/models/kimi-k2.5-sim-eagle3",
    "tp_size": 8,
    "extra_args": ["--mem-fraction-static", "0.85", "--cuda-graph-max-bs", "8"],
    "env": {"NCCL_PROTO": "LL"},
}


def _names(grid: sweeps.Grid) -> list[str]:
    return [c["name"] for c in grid.candidates]


def test_it_names_each_candidate_after_its_values_and_keeps_the_base():
    grid = build_grid(BASE, Sweep(steps=(2, 3), topk=(1,)))

    assert _names(grid) == ["s2-k1-d3", "s3-k1-d4"]
    first = grid.candidates[0]
    assert (first["speculative_num_steps"], first["speculative_eagle_topk"], first["speculative_num_draft_tokens"]) == (
        2,
        1,
        3,
    )
    assert first["model_path"] == BASE["model_path"] and first["env"] == {"NCCL_PROTO": "LL"}
    assert grid.skipped == []  # no draft-token list: topk 1 takes SGLang's steps + 1, nothing to report


def test_it_replaces_draft_tokens_under_topk_1_says_so_and_runs_each_once():
    grid = build_grid(BASE, Sweep(steps=(2,), topk=(1, 2), draft_tokens=(3, 4, 6)))

    assert _names(grid) == ["s2-k1-d3", "s2-k2-d3", "s2-k2-d4", "s2-k2-d6"]
    replaced = {s.label: s for s in grid.skipped}
    assert set(replaced) == {"s2-k1-d4", "s2-k1-d6"}
    assert replaced["s2-k1-d6"].replaced_by == "s2-k1-d3"
    assert "steps + 1 = 3" in replaced["s2-k1-d6"].reason
    assert any("topk 1" in note for note in grid.notes)


def test_it_skips_more_draft_tokens_than_the_draft_tree_holds():
    # steps 2, topk 2: 2 + 1 * 4 = 6 tree nodes, so at most 7 draft tokens.
    grid = build_grid(BASE, Sweep(steps=(1, 2), topk=(2,), draft_tokens=(3, 7, 8)))

    assert _names(grid) == ["s1-k2-d3", "s2-k2-d3", "s2-k2-d7"]
    reasons = {s.label: s.reason for s in grid.skipped}
    assert set(reasons) == {"s1-k2-d7", "s1-k2-d8", "s2-k2-d8"}
    assert "at most 7" in reasons["s2-k2-d8"] and "at most 3" in reasons["s1-k2-d8"]
    assert all(s.replaced_by is None for s in grid.skipped)


def test_it_skips_topk_above_1_without_draft_tokens():
    grid = build_grid(BASE, Sweep(steps=(2,), topk=(1, 4)))

    assert _names(grid) == ["s2-k1-d3"]
    (skipped,) = grid.skipped
    assert skipped.label == "s2-k4" and "needs draft tokens" in skipped.reason


@pytest.mark.parametrize(
    "change, why",
    [
        ({"env": {"SGLANG_ENABLE_SPEC_V2": "True"}}, "SGLANG_ENABLE_SPEC_V2"),
        ({"extra_args": ["--attention-backend", "trtllm_mha"]}, "trtllm_mha"),
        ({"extra_args": ["--decode-attention-backend=trtllm_mha"]}, "trtllm_mha"),
        ({"extra_args": ["--page-size", "16"]}, "flashinfer"),
    ],
)
def test_it_skips_topk_above_1_where_sglang_refuses_it(change, why):
    grid = build_grid({**BASE, **change}, Sweep(steps=(2,), topk=(1, 2), draft_tokens=(4,)))

    assert _names(grid) == ["s2-k1-d3"]
    assert why in next(s.reason for s in grid.skipped if s.label == "s2-k2-d4")


def test_it_allows_topk_above_1_with_pages_on_flashinfer():
    base = {**BASE, "extra_args": ["--page-size", "16", "--attention-backend", "flashinfer"]}

    assert _names(build_grid(base, Sweep(steps=(2,), topk=(2,), draft_tokens=(4,)))) == ["s2-k2-d4"]


def test_it_varies_flags_and_env_replacing_the_bases_own_setting():
    sweep = Sweep(
        steps=(2,),
        topk=(1,),
        flags=(("--mem-fraction-static", ("0.8", "0.9")),),
        env=(("NCCL_PROTO", ("LL", "Simple")),),
        name_prefix="eagle3",
    )

    grid = build_grid(BASE, sweep)

    assert _names(grid) == [
        "eagle3-s2-k1-d3 mem-fraction-static=0.8 NCCL_PROTO=LL",
        "eagle3-s2-k1-d3 mem-fraction-static=0.8 NCCL_PROTO=Simple",
        "eagle3-s2-k1-d3 mem-fraction-static=0.9 NCCL_PROTO=LL",
        "eagle3-s2-k1-d3 mem-fraction-static=0.9 NCCL_PROTO=Simple",
    ]
    last = grid.candidates[-1]
    assert last["extra_args"] == ["--cuda-graph-max-bs", "8", "--mem-fraction-static", "0.9"]
    assert last["env"] == {"NCCL_PROTO": "Simple"}
    assert BASE["extra_args"][:2] == ["--mem-fraction-static", "0.85"]  # the base is not changed


def test_it_applies_the_rules_to_a_varied_flag():
    sweep = Sweep(steps=(2,), topk=(2,), draft_tokens=(4,), flags=(("--attention-backend", ("fa3", "trtllm_mha")),))

    grid = build_grid(BASE, sweep)

    assert _names(grid) == ["s2-k2-d4 attention-backend=fa3"]
    assert [s.label for s in grid.skipped] == ["s2-k2-d4 attention-backend=trtllm_mha"]


def test_it_refuses_a_base_outside_the_eagle_family():
    with pytest.raises(SweepError) as raised:
        build_grid({**BASE, "speculative_algorithm": "NGRAM"}, Sweep(steps=(2,), topk=(1,)))

    assert raised.value.field == "base" and "NGRAM" in raised.value.message


def test_it_bounds_the_combinations():
    sweep = Sweep(steps=tuple(range(1, 17)), topk=tuple(range(1, 9)), draft_tokens=tuple(range(2, 12)))

    with pytest.raises(SweepError, match="1280 combinations"):
        build_grid(BASE, sweep)


def test_it_says_why_a_grid_cannot_be_submitted():
    empty = build_grid(BASE, Sweep(steps=(1,), topk=(2,), draft_tokens=(8,)))
    many = build_grid(BASE, Sweep(steps=tuple(range(1, 11)), topk=(1,)))

    assert "No valid candidate" in (empty.refusal(50) or "")
    assert "10 candidates, more than the 9" in (many.refusal(9) or "")
    assert many.refusal(10) is None


@pytest.mark.parametrize(
    "value, parsed",
    [
        ("3, 1 2,2", (1, 2, 3)),
        ([4, "2"], (2, 4)),
        ("", ()),
        (None, ()),
        ("1-3, 6..7", (1, 2, 3, 6, 7)),
        (["2-4"], (2, 3, 4)),
    ],
)
def test_it_parses_number_lists_as_typed_or_sent(value, parsed):
    assert sweeps.parse_numbers(value, sweeps.STEPS) == parsed


@pytest.mark.parametrize(
    "value, message",
    [
        ("1, x", "'x' is not a whole number"),
        ("0", "outside 1..16"),
        ("17", "outside 1..16"),
        ([True], "not a whole number"),
        ([1.5], "not a whole number"),
        ({"a": 1}, "list of whole numbers"),
        ("3-1", "a range within 1..16"),
        ("1-99", "a range within 1..16"),
    ],
)
def test_it_refuses_bad_number_lists(value, message):
    with pytest.raises(SweepError) as raised:
        sweeps.parse_numbers(value, sweeps.STEPS)

    assert raised.value.field == sweeps.STEPS
    assert message in raised.value.message


def test_it_bounds_the_length_of_a_list():
    with pytest.raises(SweepError, match="At most 16 values"):
        sweeps.parse_numbers(list(range(1, 18)), sweeps.DRAFT)


def test_it_parses_varied_flags_and_env_as_typed_or_sent():
    typed = "--mem-fraction-static 0.8, 0.85, 0.8\n\n--cuda-graph-max-bs=4,8"

    assert sweeps.parse_varied(typed, "f", "flag") == (
        ("--mem-fraction-static", ("0.8", "0.85")),
        ("--cuda-graph-max-bs", ("4", "8")),
    )
    assert sweeps.parse_varied({"NCCL_PROTO": ["LL", "Simple"]}, "e", "env") == (("NCCL_PROTO", ("LL", "Simple")),)
    assert sweeps.parse_varied({"--mem-fraction-static": [0.8, 0.85]}, "f", "flag") == (
        ("--mem-fraction-static", ("0.8", "0.85")),
    )


@pytest.mark.parametrize(
    "value, kind, message",
    [
        ("mem-fraction-static 0.8", "flag", "Expected a line like --mem-fraction-static"),
        ({"NCCL PROTO": ["LL"]}, "env", "is not a valid environment variable name"),
        ({"mem-fraction": ["1"]}, "flag", "is not a valid flag name"),
        ({"--mem-fraction-static": ["--disable-cuda-graph"]}, "flag", "is a flag, not a value"),
        ({"NCCL_PROTO": "LL"}, "env", "give a list of values"),
        ({"NCCL_PROTO": [None]}, "env", "is not a value"),
        ({"NCCL_PROTO": ["a\nb"]}, "env", "one line each"),
        ("A=1\nB=1\nC=1\nD=1\nE=1", "env", "At most 4"),
        ([1], "env", "Give an object"),
    ],
)
def test_it_refuses_bad_varied_values(value, kind, message):
    with pytest.raises(SweepError) as raised:
        sweeps.parse_varied(value, "field", kind)

    assert message in raised.value.message


def test_it_estimates_launches_with_the_baseline_and_their_duration():
    estimate = sweeps.estimate(candidates=4, launches_per_config=2, seconds_per_launch=90.0)

    assert (estimate.configs, estimate.launches, estimate.seconds) == (5, 10, 900.0)


def test_it_derives_a_default_launch_duration_from_the_profile():
    profile = {"output_len": 100, "num_prompts": 8, "concurrency": [1, 4], "passes": 3, "warmup_requests": 1}

    # (8 waves at concurrency 1 + 2 at 4) x 3 passes + 1 warm-up = 31 waves of 100 tokens at 20 ms.
    assert sweeps.default_launch_seconds(profile) == pytest.approx(sweeps.DEFAULT_LOAD_SECONDS + 62.0)
