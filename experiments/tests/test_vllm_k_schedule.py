"""A schedule's bands as vLLM's K per batch size (formats/vllm_k_schedule.py)."""

from __future__ import annotations

from experiments.formats import vllm_k_schedule


def test_each_band_is_a_range_of_batch_sizes_with_its_winners_steps_end_to_end():
    bands = [
        {"low": 4, "high": 8, "steps": 2, "config": "s2"},
        {"low": 1, "high": 2, "steps": 3, "config": "s3"},
        {"low": 16, "high": 32, "steps": 1, "config": "s1"},
    ]

    schedule = vllm_k_schedule.from_bands(bands, max_batch=256)

    assert schedule.speculative_config() == {
        "num_speculative_tokens_per_batch_size": [[1, 3, 3], [4, 15, 2], [16, 256, 1]]
    }
    assert schedule.notes == []


def test_a_band_without_speculation_is_said_and_drafts_the_least():
    schedule = vllm_k_schedule.from_bands([{"low": 1, "high": 4, "steps": 3}, {"low": 8, "high": 64, "steps": 0}])

    assert schedule.ranges == [[1, 7, 3], [8, vllm_k_schedule.MAX_BATCH, 1]]
    assert len(schedule.notes) == 1 and "c=8-64: no speculation won" in schedule.notes[0]
