"""The verify phase's checks: the server runs what was asked, and every process received the environment."""

from __future__ import annotations

from workers.run.server import ServerProcess
from workers.run.verify import env_problems, server_arg_problems
from workers.sglang.adapter import SGLANG


def test_it_reports_rewritten_args_then_unmet_expectations():
    requested = {"tp_size": 8, "speculative_algorithm": "EAGLE3"}
    expect = {"server_args": {"speculative_num_steps": 3, "enable_dp_attention": True}}
    effective = {"tp_size": 8, "speculative_algorithm": "EAGLE", "speculative_num_steps": 2}

    assert server_arg_problems(SGLANG, requested, expect, effective) == [
        "requested speculative_algorithm='EAGLE3', the server runs speculative_algorithm='EAGLE'",
        "expected server arg speculative_num_steps=3, the server runs speculative_num_steps=2",
        "expected server arg enable_dp_attention=True, but the server does not report enable_dp_attention",
    ]
    assert server_arg_problems(SGLANG, requested, {}, {**effective, "speculative_algorithm": "EAGLE3"}) == []


def test_it_names_the_missing_variables_per_process_and_sets_unreadable_ones_apart():
    processes = [
        ServerProcess(100, "python -m sglang.launch_server", frozenset({"NCCL_PROTO", "NCCL_ALGO", "PATH"})),
        ServerProcess(101, "sglang::scheduler_TP0", frozenset({"PATH"})),
        ServerProcess(102, "sglang::scheduler_TP1", frozenset()),  # setproctitle zeroed its environ
    ]

    missing, unreadable = env_problems(["NCCL_PROTO", "NCCL_ALGO"], processes)

    assert missing == ["NCCL_PROTO, NCCL_ALGO missing in pid 101 (sglang::scheduler_TP0)"]
    assert unreadable == [102]
    assert env_problems(["PATH"], processes[:2]) == ([], [])
