"""Reading nvidia-smi's answers: the processes holding GPU memory and the GPU inventory."""

from __future__ import annotations

import pytest

from workers.hostreads.gpus import ComputeApp, parse_compute_apps, parse_gpu_inventory

# --- nvidia-smi ---------------------------------------------------------------------------------------------


def test_it_parses_compute_apps():
    text = "12345, 81920\n12346, 1024\n"

    assert parse_compute_apps(text) == [ComputeApp(pid=12345, used_mib=81920), ComputeApp(pid=12346, used_mib=1024)]


def test_it_reads_the_gpu_index_when_given():
    assert parse_compute_apps("777, 512, 3") == [ComputeApp(pid=777, used_mib=512, gpu_index=3)]


@pytest.mark.parametrize("text", ["", "\n", "No running processes found\n", "pid, used_gpu_memory [MiB]\n"])
def test_it_finds_no_compute_apps_on_idle_gpus(text):
    assert parse_compute_apps(text) == []


def test_it_counts_a_process_whose_memory_is_not_reported():
    assert [app.pid for app in parse_compute_apps("4242, [N/A]\n")] == [4242]


def test_it_parses_the_gpu_inventory():
    text = "0, NVIDIA H200, 0, 143771\n1, NVIDIA H200, 81920.0, 143771\n"

    assert parse_gpu_inventory(text) == [
        {"index": 0, "name": "NVIDIA H200", "memory_used_mib": 0, "memory_total_mib": 143771},
        {"index": 1, "name": "NVIDIA H200", "memory_used_mib": 81920, "memory_total_mib": 143771},
    ]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "index, name, memory.used [MiB], memory.total [MiB]\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        "0, NVIDIA H200, [N/A]\n",
        "0, NVIDIA H200, [N/A], [N/A]\n",
    ],
)
def test_it_skips_lines_that_are_not_gpus(text):
    assert parse_gpu_inventory(text) == []
