"""The host readers' parsers on the real outputs of ../shared/reference/nvidia-smi-h200.md, and the fingerprint
script run for real (locally, against the simulated nvidia-smi and a throwaway SGLang checkout)."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

from experiments.analysis import telemetry
from experiments.analysis.telemetry import GpuReading
from experiments.rules import secrets
from simhost import hostsetup
from workers.hostreads import environ, fingerprint, gpus

# Copied from the reference document (driver 580.159.04, 1 x H200).
REAL_PERFORMANCE = """\
index, clocks.current.sm [MHz], clocks.current.memory [MHz], clocks.max.sm [MHz], temperature.gpu, power.draw [W], power.limit [W], utilization.gpu [%], utilization.memory [%], clocks_event_reasons.active, clocks_event_reasons.active, pstate
0, 405 MHz, 3201 MHz, 1980 MHz, 36, 123.84 W, 700.00 W, 0 %, 0 %, 0x0000000000000001, 0x0000000000000001, P0
"""  # noqa: E501
REAL_DETAILS_HEADER = """\
driver_version, vbios_version, pci.bus_id, compute_mode, persistence_mode
580.159.04, 96.00.A5.00.1A, 00000000:00:06.0, Default, Enabled
"""
REAL_BANNER = "| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |"
# The reference's group holding memory, asked the way COMPUTE_APPS_QUERY asks (pid, used memory).
REAL_APPS = "481, 4334\n503, 8148\n"
REAL_APPS_HEADER_ONLY = "pid, used_gpu_memory [MiB]\n"


# Captured with this module's own queries on a real 1-GPU H200 (driver 580.159.04, PyTorch 2.11 holding 1122 MiB in
# the second half), 2026-12-01: the details, the sampler's loop (-lms) idle and then with a CUDA context open, and the
# sampler's query with units and header.
REAL_DETAILS = (
    "0, NVIDIA H200, GPU-1a50073c-d880-0c93-7826-01684d709657, 143771, 700.00, 1980, Enabled, Default, 580.159.04, "
    "96.00.A5.00.1A, 00000000:00:06.0\n"
)
REAL_LOOP = """\
0, 345, 3201, 33, 77.00, 0, 0, 0, 0x0000000000000001
0, 345, 3201, 33, 76.95, 0, 0, 0, 0x0000000000000001
0, 1980, 3201, 35, 120.57, 0, 0, 1131, 0x0000000000000000
"""
REAL_TELEMETRY_WITH_UNITS = """\
index, clocks.current.sm [MHz], clocks.current.memory [MHz], temperature.gpu, power.draw [W], utilization.gpu [%], utilization.memory [%], memory.used [MiB], clocks_event_reasons.active
0, 345 MHz, 3201 MHz, 33, 76.91 W, 0 %, 0 %, 0 MiB, 0x0000000000000001
"""  # noqa: E501


def test_it_reads_what_a_real_h200_answered_to_the_samplers_and_the_fingerprints_queries():
    idle, _, busy = gpus.parse_telemetry(REAL_LOOP)
    assert idle == GpuReading(0, 345, 3201, 33, 77.0, 0, 0, 0, 0x1)
    # A process with a CUDA context: full clocks and no reason at all (not "idle"), and not throttled.
    assert busy.sm_mhz == 1980 and busy.memory_used_mib == 1131 and busy.reasons == 0 and not busy.throttled
    assert gpus.parse_telemetry(REAL_TELEMETRY_WITH_UNITS) == [GpuReading(0, 345, 3201, 33, 76.91, 0, 0, 0, 1)]
    [gpu] = gpus.parse_gpu_details(REAL_DETAILS)
    assert gpu["name"] == "NVIDIA H200" and gpu["pci_bus_id"] == "00000000:00:06.0"
    assert (
        fingerprint.gpu_summary([gpu])
        == "1 x NVIDIA H200, 143771 MiB, 700 W limit, max SM 1980 MHz, persistence Enabled"
    )


def test_it_reads_a_telemetry_sample_in_the_real_format_with_units():
    # The reference's query in TELEMETRY_FIELDS order, values as driver 580 prints them (units included).
    line = "0, 405 MHz, 3201 MHz, 36, 123.84 W, 0 %, 0 %, 0 MiB, 0x0000000000000001"
    sample = gpus.parse_telemetry_line(line)
    assert sample == GpuReading(0, 405, 3201, 36, 123.84, 0, 0, 0, 0x1)
    assert not sample.throttled
    assert telemetry.clock_event_reasons(sample.reasons or 0) == ["idle"]


def test_it_reads_the_real_performance_row_values_and_skips_its_header():
    header, row = REAL_PERFORMANCE.splitlines()
    cells = [c.strip() for c in row.split(",")]
    # The cells the sampler asks for, in its order, taken from the real row: the parser reads every one.
    mine = ", ".join([cells[0], cells[1], cells[2], cells[4], cells[5], cells[7], cells[8], "0", cells[10]])
    assert gpus.parse_telemetry(header + "\n" + mine) == [GpuReading(0, 405, 3201, 36, 123.84, 0, 0, 0, 1)]
    assert gpus.parse_telemetry(header) == []


def test_it_names_throttle_reasons_and_tells_throttling_from_idle():
    assert telemetry.clock_event_reasons(0x60) == ["SW thermal slowdown", "HW thermal slowdown"]
    assert telemetry.is_throttled(0x4) and telemetry.is_throttled(0x40)
    assert not telemetry.is_throttled(0x1) and not telemetry.is_throttled(0x0)
    sample = gpus.parse_telemetry_line("3, 1320, 3201, 88, 690.2, 97, 60, 120000, 0x0000000000000060")
    assert sample is not None and sample.throttled and sample.sm_mhz == 1320


def test_it_reads_gpu_details_and_the_driver_cuda_version():
    # GPU_DETAILS_FIELDS for the reference's GPU, each value as driver 580 printed it.
    real = (
        "0, NVIDIA H200, GPU-b336f7ee-a5ce-8e63-c844-93ae5d8a5117, 143771, 700.00, 1980, Enabled, Default, "
        "580.159.04, 96.00.A5.00.1A, 00000000:00:06.0"
    )
    [gpu] = gpus.parse_gpu_details(real)
    assert gpu["memory_total_mib"] == 143771 and gpu["power_limit_w"] == 700.0 and gpu["max_sm_clock_mhz"] == 1980
    assert gpu["driver_version"] == "580.159.04" and gpu["persistence_mode"] == "Enabled"
    assert fingerprint.gpu_summary([gpu]) == (
        "1 x NVIDIA H200, 143771 MiB, 700 W limit, max SM 1980 MHz, persistence Enabled"
    )
    assert gpus.parse_gpu_details(REAL_DETAILS_HEADER) == []  # another query's answer is not mistaken for ours
    assert gpus.driver_cuda_version(REAL_BANNER) == "13.0"
    assert gpus.driver_cuda_version("No devices were found") is None


def test_it_reads_the_real_compute_apps_whatever_the_process_name():
    apps = gpus.parse_compute_apps(REAL_APPS)
    assert [(a.pid, a.used_mib) for a in apps] == [(481, 4334), (503, 8148)]
    assert gpus.parse_compute_apps("") == []  # idle: empty output, exit 0
    assert gpus.parse_compute_apps(REAL_APPS_HEADER_ONLY) == []


def test_it_reports_a_blank_environ_as_unreadable_not_empty():
    block = base64.b64encode(b"NCCL_PROTO=LL\0PATH=/usr/bin\0HF_TOKEN=abc\0").decode()
    output = f"@@pid 481\npython3 -m sglang.launch_server\n{block}\n@@pid 503\nsglang::scheduler\n\n@@pid 9\n\n\n"
    leader, scheduler = environ.parse_group(output)  # pid 9 exited between pgrep and ps
    assert leader.env == {"NCCL_PROTO": "LL", "PATH": "/usr/bin", "HF_TOKEN": "abc"}
    assert scheduler.pid == 503 and scheduler.env is None and not scheduler.readable
    assert environ.shown_env(leader.env) == {"HF_TOKEN": secrets.MASK, "NCCL_PROTO": "LL"}


def test_it_takes_the_launchers_interpreter():
    assert fingerprint.launcher_python("/opt/v/bin/python -m sglang.launch_server") == ["/opt/v/bin/python"]
    assert fingerprint.launcher_python("sglang serve", "python3.12") == ["python3.12"]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_it_fingerprints_a_host_with_an_sglang_checkout_and_local_changes(tmp_path):
    repo = tmp_path / "sglang"
    package = repo / "python" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the probe must not import sglang')\n")
    (package / "version.py").write_text('__version__ = "0.5.10.dev0"\n')
    (package / "server.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "sglang")
    (package / "server.py").write_text("x = 2\n")  # a local change
    env = {
        "PYTHONPATH": f"{repo / 'python'}:{hostsetup.REPO / 'simhost' / 'site'}",
        "NCCL_PROTO": f"LL; touch {tmp_path}/a $(touch {tmp_path}/b)",
    }
    path = f"{hostsetup.REPO / 'simhost' / 'bin'}:/usr/bin:/bin"
    script = fingerprint.script([sys.executable], env)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={"PATH": path}, timeout=60)
    found = fingerprint.parse(done.stdout)
    assert found["problems"] == [], done.stdout
    sglang = found["packages"]["sglang"]
    assert sglang["version"] == "0.5.10.dev0"
    assert sglang["checkout"]["commit"] == _git(repo, "rev-parse", "HEAD")
    assert sglang["checkout"]["files_changed"] == 1 and len(sglang["checkout"]["local_changes_sha256"]) == 64
    assert found["kernel"] and found["python"] == ".".join(map(str, sys.version_info[:3]))
    assert found["driver"] and found["gpus"][0]["name"].startswith("NVIDIA")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # a value stays one word
