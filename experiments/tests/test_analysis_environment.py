"""The environment diff in words, from two fingerprints and environments."""

from __future__ import annotations

import copy
from typing import Any

from experiments.analysis.environment import Snapshot, changes, summary

BEFORE: dict[str, Any] = {
    "kernel": "6.8.0-49-generic",
    "driver": "580.159.04",
    "cuda_driver": "13.0",
    "gpu_summary": "8 x NVIDIA H200, 143771 MiB, 700 W limit, max SM 1980 MHz, persistence Enabled",
    "python": "3.12.3",
    "packages": {
        "sglang": {
            "version": "0.5.9",
            "checkout": {"commit": "abc1234aaaa", "files_changed": 0, "local_changes_sha256": None},
        },
        "torch": {"version": "2.9.1+cu128", "cuda": "12.8"},
        "nccl": {"version": "2.27.3"},
        "flashinfer": {"version": "0.5.3"},
    },
}


def _after() -> dict[str, Any]:
    after = copy.deepcopy(BEFORE)
    after["packages"]["sglang"] = {
        "version": "0.5.10.dev",
        "checkout": {"commit": "def5678bbbb", "files_changed": 3, "local_changes_sha256": "9" * 64},
    }
    return after


def test_it_says_what_changed_and_which_key_facts_did_not():
    before = Snapshot(BEFORE, {"NCCL_ALGO": "Ring"})
    after = Snapshot(_after(), {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"})

    assert summary(before, after) == (
        "SGLang 0.5.9 -> 0.5.10.dev (commit abc1234..def5678, 3 files changed), NCCL_PROTO unset -> LL; "
        "PyTorch, CUDA (PyTorch), NCCL, driver, GPUs same"
    )
    assert [(c.what, c.kind) for c in changes(before, after)] == [("SGLang", "software"), ("NCCL_PROTO", "env")]


def test_it_names_local_changes_of_the_same_commit_and_a_variable_that_went_away():
    after = copy.deepcopy(BEFORE)
    after["packages"]["sglang"]["checkout"] = {"commit": "abc1234aaaa", "files_changed": 1, "local_changes_sha256": "1"}
    after["driver"] = "580.165.01"

    text = summary(Snapshot(BEFORE, {"NCCL_PROTO": "LL"}), Snapshot(after, {}))

    assert text == (
        "SGLang 0.5.9 (1 file changed), driver 580.159.04 -> 580.165.01, NCCL_PROTO LL -> unset; "
        "PyTorch, CUDA (PyTorch), NCCL, GPUs same"
    )


def test_it_says_no_difference_and_what_it_could_not_compare():
    assert summary(Snapshot(BEFORE, {}), Snapshot(copy.deepcopy(BEFORE), {})) == (
        "No difference; SGLang, PyTorch, CUDA (PyTorch), NCCL, driver, GPUs same"
    )
    assert summary(Snapshot({}, {}, "run 3"), Snapshot(BEFORE, {"NCCL_PROTO": "LL"}, "run 4")) == (
        "NCCL_PROTO unset -> LL; run 3 has no environment fingerprint"
    )
    assert summary(Snapshot({}, {}, "run 3"), Snapshot({}, {}, "run 4")) == (
        "No difference in environment variables; run 3 and run 4 have no environment fingerprint"
    )
