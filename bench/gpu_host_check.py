"""Check specdash's host-side readers against a real GPU host: the environment fingerprint, a telemetry sample, the
environment of a process group, and the teardown check (an orphan left holding GPU memory after only its group's
leader was killed is found, killed, and the memory is seen free again).

    python bench/gpu_host_check.py --local                    # on the GPU host itself
    python bench/gpu_host_check.py --ssh user@gpu-host        # from anywhere, through the system's ssh

Needs the standard library and this repository's pure readers (`workers.hostreads`): no Django.
The teardown check needs PyTorch with CUDA on the host (`--python` picks the interpreter); without it that part
is skipped, saying why. It holds --leader-mib and --child-mib of GPU memory for under a minute and always cleans up.
Exit status: 0 when every check passed (or was skipped), 1 when one failed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.analysis import telemetry
from workers.hostreads import environ, fingerprint, gpus

MARKER = "SPECDASH_GPU_CHECK"
# A leader holding memory with one spawned child holding more, like SGLang's launcher and a scheduler rank (the
# reference document's experiment). Spawn needs a file for __main__, so this is written to a temporary file.
HOLDER = """\
import multiprocessing, os, sys, time
import torch

def hold(mib):
    block = torch.empty(mib * 1024 * 1024, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    return block

def child(mib):
    kept = hold(mib)
    print("child", os.getpid(), flush=True)
    time.sleep(float(sys.argv[3]))

if __name__ == "__main__":
    kept = hold(int(sys.argv[1]))
    process = multiprocessing.get_context("spawn").Process(target=child, args=(int(sys.argv[2]),))
    process.start()
    print("leader", os.getpid(), flush=True)
    time.sleep(float(sys.argv[3]))
"""


class Host:
    """Runs bash on the GPU host: here, or through the system's ssh (BatchMode: keys or an agent, no prompt)."""

    def __init__(self, ssh: str | None, ssh_options: list[str]) -> None:
        self.ssh, self.ssh_options = ssh, ssh_options

    def run(self, script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        if self.ssh is None:
            argv = ["bash", "-c", script]
        else:
            argv = ["ssh", "-o", "BatchMode=yes", *self.ssh_options, self.ssh, "exec bash -c " + shlex.quote(script)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def say(text: str = "") -> None:
    print(text, flush=True)


def check_fingerprint(host: Host, python: list[str]) -> bool:
    say("== Environment fingerprint (one command)")
    started = time.monotonic()
    result = host.run(fingerprint.script(python, {}), timeout=180)
    found = fingerprint.parse(result.stdout)
    say(f"   read in {time.monotonic() - started:.1f} s")
    packages = found.get("packages") or {}
    for name in ("sglang", "torch", "nccl", "flashinfer", "sgl_kernel", "triton"):
        info = packages.get(name) or {}
        extra = f", CUDA {info['cuda']}" if info.get("cuda") else ""
        checkout = info.get("checkout")
        if checkout:
            extra += (
                f", checkout {checkout.get('root', '')} at {str(checkout.get('commit'))[:12]}, "
                f"{checkout.get('files_changed')} files changed locally"
            )
        say(f"   {name:<11} {info.get('version') or 'not installed'}{extra}")
    say(f"   python      {found.get('python')} ({found.get('executable')})")
    say(f"   driver      {found.get('driver')}, CUDA {found.get('cuda_driver')}")
    say(f"   GPUs        {found.get('gpu_summary')}")
    say(f"   kernel      {found.get('kernel')}")
    for problem in found.get("problems") or []:
        say(f"   PROBLEM: {problem}")
    return bool(found.get("gpus")) and bool(found.get("python"))


def check_telemetry(host: Host) -> bool:
    say("== GPU telemetry (the sampler's query, every 500 ms for 2 s)")
    result = host.run(f"timeout 2 {gpus.telemetry_loop_command(500)}", timeout=30)
    samples = gpus.parse_telemetry(result.stdout)
    for s in samples:
        reasons = ", ".join(telemetry.clock_event_reasons(s.reasons or 0)) or "none"
        say(
            f"   GPU {s.gpu}: SM {s.sm_mhz} MHz, memory {s.mem_mhz} MHz, {s.temperature_c} C, {s.power_w} W, "
            f"util {s.utilization_pct}%, {s.memory_used_mib} MiB used, reasons {reasons}"
            + (" (THROTTLED)" if s.throttled else "")
        )
    if not samples:
        say(f"   PROBLEM: no sample parsed from: {(result.stdout + result.stderr).strip()[:400]!r}")
    return bool(samples)


def _compute_apps(host: Host) -> dict[int, int]:
    result = host.run(gpus.COMPUTE_APPS_QUERY, timeout=60)
    return {app.pid: app.used_mib for app in gpus.parse_compute_apps(result.stdout)}


def _group_pids(host: Host, pgid: int) -> list[int]:
    return [int(p) for p in host.run(f"pgrep -g {int(pgid)} || true").stdout.split() if p.isdigit()]


def _memory_used(host: Host) -> int:
    rows = gpus.parse_gpu_inventory(host.run(gpus.GPU_INVENTORY_QUERY).stdout)
    return sum(row["memory_used_mib"] for row in rows)


def _wait(what: str, until: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if until():
            return True
        time.sleep(1)
    say(f"   gave up waiting for {what} after {seconds:.0f} s")
    return False


def check_teardown(host: Host, python: list[str], leader_mib: int, child_mib: int) -> bool | None:
    say("== Teardown check: a process group holding GPU memory, only its leader killed")
    py = " ".join(shlex.quote(w) for w in python)
    probe = host.run(f"{py} -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)'", timeout=120)
    if probe.returncode != 0:
        why = "CUDA is not available to it" if probe.returncode == 3 else "it cannot import torch"
        say(f"   SKIPPED: {' '.join(python)} has no usable PyTorch ({why}); pass --python /path/to/venv/bin/python")
        return None
    before = _memory_used(host)
    script = (
        f'f=$(mktemp --suffix=.py) && printf %s {shlex.quote(HOLDER)} > "$f" && '
        f'{{ {MARKER}=1 setsid {py} "$f" {int(leader_mib)} {int(child_mib)} 600 > "$f.log" 2>&1 < /dev/null & }}'
        " && echo $!"
    )
    started = host.run(script)
    leader = int(started.stdout.split()[-1]) if started.stdout.split() else 0
    if not leader:
        say(f"   FAILED to start the holder: {started.stderr.strip()[:400]}")
        return False
    pgid = leader  # setsid made the leader its own group (and session)
    ok = False
    try:
        say(f"   started leader pid {leader} (pgid {pgid}); waiting for both processes to hold memory")
        holders: dict[int, int] = {}

        def both_hold() -> bool:
            nonlocal holders
            group = set(_group_pids(host, pgid))
            holders = {pid: mib for pid, mib in _compute_apps(host).items() if pid in group}
            return len(holders) >= 2

        if not _wait("the group to hold GPU memory", both_hold, 180):
            return False
        say(f"   nvidia-smi: {', '.join(f'pid {p} holds {m} MiB' for p, m in sorted(holders.items()))}")
        say(f"   memory.used {before} -> {_memory_used(host)} MiB")
        for process in environ.parse_group(host.run(environ.group_command(pgid)).stdout):
            state = "unreadable (blank)" if process.env is None else f"{len(process.env)} variables"
            reached = (
                "" if process.env is None else f", {MARKER} {'reached it' if MARKER in process.env else 'MISSING'}"
            )
            say(f"   environ of pid {process.pid} ({process.title[:60]}): {state}{reached}")
        host.run(f"kill -KILL {leader}")
        say(f"   killed only the leader {leader} (SIGKILL)")
        time.sleep(2)
        group = set(_group_pids(host, pgid))
        orphans = {pid: mib for pid, mib in _compute_apps(host).items() if pid in group or pid in holders}
        if not orphans:
            say("   UNEXPECTED: nothing of the group holds memory after the leader's death")
            return False
        say(
            "   orphan found by the worker's reader (nvidia-smi compute apps within the group): "
            + ", ".join(f"pid {p} still holds {m} MiB" for p, m in sorted(orphans.items()))
            + f"; the group still lists {sorted(group)}"
        )
        host.run(f"kill -TERM -- -{pgid} 2>/dev/null; sleep 3; kill -KILL -- -{pgid} 2>/dev/null; true")
        say(f"   SIGTERM then SIGKILL to the group -{pgid}")
        ok = _wait("the memory to be freed", lambda: not (set(_compute_apps(host)) & set(orphans)), 30)
        after = _memory_used(host)
        say(
            f"   compute apps of the group after the kill: {'none' if ok else 'STILL HOLDING'}; memory.used {after} MiB"
        )
        return ok
    finally:
        if not ok:
            host.run(f"kill -KILL -- -{pgid} 2>/dev/null; true")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", action="store_true", help="run on this machine (the GPU host)")
    where.add_argument("--ssh", metavar="USER@HOST", help="run on a host through the system's ssh")
    parser.add_argument("--ssh-option", action="append", default=[], help="passed to ssh as -o VALUE (repeatable)")
    parser.add_argument("--python", default="python3", help="the interpreter that runs SGLang and PyTorch there")
    parser.add_argument("--leader-mib", type=int, default=1024)
    parser.add_argument("--child-mib", type=int, default=2048)
    parser.add_argument("--skip-teardown", action="store_true")
    parser.add_argument("--json", action="store_true", help="also print the parsed fingerprint as JSON")
    args = parser.parse_args()
    options = [item for value in args.ssh_option for item in ("-o", value)]
    host = Host(None if args.local else args.ssh, options)
    python = shlex.split(args.python)
    results: dict[str, bool | None] = {
        "fingerprint": check_fingerprint(host, python),
        "telemetry": check_telemetry(host),
    }
    if args.json:
        say(json.dumps(fingerprint.parse(host.run(fingerprint.script(python, {}), timeout=180).stdout), indent=2))
    if not args.skip_teardown:
        results["teardown"] = check_teardown(host, python, args.leader_mib, args.child_mib)
    say("== " + ", ".join(f"{k}: {'skipped' if v is None else 'ok' if v else 'FAILED'}" for k, v in results.items()))
    return 1 if any(v is False for v in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
