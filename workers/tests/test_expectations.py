"""The pure checks behind the verify and benchmark phases: expectations, the client's command line and result."""

from __future__ import annotations

import shlex

from experiments.models import BenchmarkProfile, Host
from workers import benchrun
from workers.expectations import env_problems, server_arg_problems
from workers.server_process import ServerProcess


def test_it_reports_rewritten_args_then_unmet_expectations():
    requested = {"tp_size": 8, "speculative_algorithm": "EAGLE3"}
    expect = {"server_args": {"speculative_num_steps": 3, "enable_dp_attention": True}}
    effective = {"tp_size": 8, "speculative_algorithm": "EAGLE", "speculative_num_steps": 2}

    assert server_arg_problems(requested, expect, effective) == [
        "requested speculative_algorithm='EAGLE3', the server runs speculative_algorithm='EAGLE'",
        "expected server arg speculative_num_steps=3, the server runs speculative_num_steps=2",
        "expected server arg enable_dp_attention=True, but the server does not report enable_dp_attention",
    ]
    assert server_arg_problems(requested, {}, {**effective, "speculative_algorithm": "EAGLE3"}) == []


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


def test_it_runs_the_client_from_its_directory_with_every_profile_setting_quoted():
    host = Host(name="gpu", python="'/opt/venv name/bin/python' -X dev", server_port=31000)
    profile = BenchmarkProfile(num_prompts=64, input_len=512, output_len=256, seed=7, warmup_requests=2,
                               request_timeout_s=120)  # fmt: skip

    command = benchrun.command(host, profile, 16, "/home/gpu/specdash work")

    cd, _, run = command.partition(" && ")
    assert shlex.split(cd) == ["cd", "--", "/home/gpu/specdash work/.specdash"]
    assert shlex.split(run) == [
        "/opt/venv name/bin/python", "-X", "dev", "-m", "benchclient", "--base-url", "http://127.0.0.1:31000",
        "--concurrency", "16", "--num-prompts", "64", "--input-len", "512", "--output-len", "256", "--seed", "7",
        "--warmup-requests", "2", "--request-timeout", "120",
    ]  # fmt: skip
    assert benchrun.timeout(profile, 16) == 120 * 5 + benchrun.TIMEOUT_MARGIN_S  # 64 prompts: 4 waves, and one more


def test_it_reads_the_clients_last_json_line_after_progress_output():
    stdout = 'benchclient: 1/2 done\n{"completed": 1}\nnot json {\n{"completed": 2, "failed": 0}\n'
    assert benchrun.result(stdout) == {"completed": 2, "failed": 0}
    assert benchrun.result('{\n  "completed": 3\n}') == {"completed": 3}  # one pretty-printed object
    assert benchrun.result("Traceback (most recent call last):\nOSError: refused") is None
    assert benchrun.result("[1, 2]") is None
