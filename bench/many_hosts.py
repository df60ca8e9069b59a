"""Many hosts at once: N Celery worker processes (as on N worker machines) driving 20 simulated hosts concurrently.

    python bench/many_hosts.py --workers 2 [--hosts 20] [--slots S] [--launches 2] [--load-seconds 1]

Each host is a Host row for the simulated GPU host behind one real OpenSSH `sshd` on loopback, as the suite's
`sim_host` fixture makes one: its own GPU state dir, server port and work dir. Each gets an experiment of one
config (tp 2) launched `--launches` times with a small benchmark (concurrency 1, 2 prompts of 32 -> 16 tokens),
all submitted at once. N `celery worker` processes of `--slots` slots each (by default enough for every host at
once: ceil(hosts / N)) take the runs from the one queue; nothing else listens to it (SPECDASH_INSTANCE names it).

The anchor is the same with one host, measured first in the same run by the same workers. For each phase it
prints, over all runs: the orchestration overhead (a run's wall time from its claim to its end, less its
`loading` and `benchmarking` phases: see scale_figures.run_times) p50/p95/max and its ratio to the anchor's, the
median of every other phase, each run's wait for a worker slot (from when it could start, queued or its host
freed, to its claim) and the runs that waited far longer than the rest (starvation), the runs that did not
succeed, and what the machine did meanwhile: CPU busy share, and the workers' CPU and memory per slot.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")

import django  # noqa: E402

django.setup()

import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from openssh_host import KEY_NAME, start_sshd  # noqa: E402
from proc_cpu import cpu_and_rss, machine_ticks, tree  # noqa: E402
from scale_figures import distribution, phase_seconds, run_times, slot_waits, starved  # noqa: E402

from experiments import roles  # noqa: E402
from experiments.actions.audit import Actor  # noqa: E402
from experiments.actions.experiments import do_create_experiment  # noqa: E402
from experiments.actions.users import do_set_role  # noqa: E402
from experiments.models import BenchmarkProfile, Host, Run, ServerConfig, SshKey  # noqa: E402
from simhost import hostsetup  # noqa: E402
from simhost.ports import free_port  # noqa: E402

# Timeouts generous: 20 hosts share 2 cores.
PROFILE = dict(
    concurrency=[1], num_prompts=2, input_len=32, output_len=16, stall_timeout_s=300, readiness_timeout_s=900
)
OVERHEAD_TARGET = 3.0


def _make_hosts(work: Path, count: int, tag: str, sshd_port: int, key_dir: Path, host_key: str,
                load_seconds: float) -> list[Host]:  # fmt: skip
    public_key = " ".join((key_dir / f"{KEY_NAME}.pub").read_text().split()[:2])
    key, _ = SshKey.objects.update_or_create(
        name="many-hosts-bench", defaults={"file_name": KEY_NAME, "public_key": public_key}
    )
    hosts = []
    for i in range(count):
        state_dir = work / f"state-{tag}-{i}"
        state_dir.mkdir()
        hosts.append(Host.objects.create(
            name=f"scale-{tag}-{i}", address="127.0.0.1", port=sshd_port, username=getpass.getuser(), ssh_key=key,
            host_key=host_key, work_dir=str(work / f"work-{tag}-{i}"), models_root=str(hostsetup.MODELS_ROOT),
            shell_setup=hostsetup.shell_setup(state_dir, load_seconds, hostsetup.FAST_HEALTH_POLL_SECONDS),
            launcher=hostsetup.LAUNCHER, python="python", server_port=free_port(),
            gpu_inventory=[{"index": g, "name": "NVIDIA H200 (simulated)"} for g in range(8)],
        ))  # fmt: skip
    return hosts


def _start_workers(work: Path, count: int, slots: int, key_dir: Path) -> list[tuple[subprocess.Popen, Path]]:
    env = {**os.environ, "SPECDASH_SSH_KEY_DIR": str(key_dir)}
    workers = []
    for i in range(count):
        log_path = work / f"worker-{i}.log"
        argv = [sys.executable, "-m", "celery", "-A", "dashboard", "worker", "--loglevel", "INFO",
                "--concurrency", str(slots), "-n", f"scale{i}@%h", "--without-gossip", "--without-mingle",
                "--without-heartbeat", "-Q", settings.CELERY_TASK_DEFAULT_QUEUE]  # fmt: skip
        process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
        workers.append((process, log_path))
    deadline = time.monotonic() + 180
    for process, log_path in workers:
        while " ready." not in log_path.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.3)
    return workers


def _stop(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _worker_pids(workers: list[tuple[subprocess.Popen, Path]]) -> list[int]:
    """Every worker process and its pool's children, as they are now."""
    return [pid for process, _ in workers for pid in tree(process.pid)]


def _phase(name: str, hosts: list[Host], launches: int, user, workers, timeout: float) -> dict:
    config = ServerConfig(name=f"many-hosts-{name}", model_path=f"{hostsetup.MODELS_ROOT}/kimi-k2.5-sim", tp_size=2)
    profile = BenchmarkProfile(name=f"many-hosts-{name}", **PROFILE, launches=launches)
    pids = _worker_pids(workers)
    cpu_before, _ = cpu_and_rss(pids)
    ticks_before = machine_ticks()
    started = time.monotonic()
    experiments = []
    for host in hosts:
        experiment = do_create_experiment(actor=Actor.command(user), name=f"many hosts {name} {host.name}",
                                          host=host, baseline=config, candidates=[], profile=profile)  # fmt: skip
        experiments.append(experiment)
    run_ids = list(Run.objects.filter(experiment__in=experiments).values_list("pk", flat=True))
    peak_rss = 0.0
    while time.monotonic() - started < timeout:
        pending = Run.objects.filter(pk__in=run_ids).exclude(state__in=Run.TERMINAL_STATES).count()
        peak_rss = max(peak_rss, cpu_and_rss(_worker_pids(workers))[1])
        if not pending:
            break
        time.sleep(1)
    elapsed = time.monotonic() - started
    busy, total = (after - before for after, before in zip(machine_ticks(), ticks_before, strict=True))
    cpu_after, _ = cpu_and_rss(_worker_pids(workers))
    runs = list(Run.objects.filter(pk__in=run_ids).order_by("pk"))
    return {"runs": runs, "elapsed": elapsed, "machine_busy": busy / total, "worker_cpu": cpu_after - cpu_before,
            "worker_rss": peak_rss}  # fmt: skip


def _seconds(at: str | None) -> float | None:
    return datetime.fromisoformat(at).timestamp() if at else None


def _figures(phase: dict) -> dict:
    runs = phase["runs"]
    finished = [run for run in runs if run.state == Run.State.SUCCEEDED]
    times = [run_times(run.phases()) for run in finished]
    claims = []
    for run in runs:
        entries = {entry["state"]: entry["at"] for entry in run.timeline}
        claims.append({"host": run.host_id, "queued": _seconds(entries.get(Run.State.QUEUED)),
                       "claimed": _seconds(entries.get(Run.State.CONNECTING)),
                       "finished": run.finished_at.timestamp() if run.finished_at else None})  # fmt: skip
    waits = slot_waits(claims)
    states: dict[str, list[float]] = {}
    for run in finished:
        for state, seconds in phase_seconds(run.phases()).items():
            states.setdefault(state, []).append(seconds)
    return {
        "runs": len(runs),
        "failed": [
            (run.pk, run.state, run.failure_kind, run.failure_message[:200])
            for run in runs
            if run.state != Run.State.SUCCEEDED
        ],
        "overhead": distribution([t["overhead"] for t in times]) if times else None,
        "wall": distribution([t["wall"] for t in times]) if times else None,
        "phases": {state: distribution(values)["p50"] for state, values in states.items()},
        "waits": distribution(waits) if waits else None,
        "starved": [waits[i] for i in starved(waits)],
        "over_target": sum(1 for t in times if t["overhead"] > OVERHEAD_TARGET),
    }


def _report(name: str, phase: dict, figures: dict, slots_total: int) -> None:
    print(f"{name}: {figures['runs']} runs in {phase['elapsed']:.0f} s; machine CPU busy {phase['machine_busy']:.0%}; "
          f"workers {phase['worker_cpu']:.1f} CPU-s ({phase['worker_cpu'] / max(figures['runs'], 1):.1f} per run), "
          f"peak RSS {phase['worker_rss']:.0f} MiB ({phase['worker_rss'] / slots_total:.0f} per slot)")  # fmt: skip
    if figures["failed"]:
        print(f"  NOT SUCCEEDED: {figures['failed']}")
    if figures["overhead"]:
        o, w = figures["overhead"], figures["wall"]
        print(f"  orchestration overhead: p50 {o['p50']:.2f} s  p95 {o['p95']:.2f} s  max {o['max']:.2f} s  "
              f"({figures['over_target']} runs over {OVERHEAD_TARGET:.0f} s); wall p50 {w['p50']:.1f} s")  # fmt: skip
    order = [str(s) for s in Run.LIFECYCLE]
    shown = sorted(figures["phases"].items(), key=lambda item: order.index(item[0]) if item[0] in order else 99)
    print("  phases (p50 s): " + ", ".join(f"{state} {seconds:.2f}" for state, seconds in shown))
    if figures["waits"]:
        wait = figures["waits"]
        print(f"  wait for a worker slot: p50 {wait['p50']:.2f} s  p95 {wait['p95']:.2f} s  max {wait['max']:.2f} s;"
              f" starved runs: {len(figures['starved'])} {[round(w, 1) for w in figures['starved']]}")  # fmt: skip


def bench(workers_count: int, host_count: int, slots: int | None, launches: int, load_seconds: float) -> None:
    slots = slots or math.ceil(host_count / workers_count)
    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username="bench")
    do_set_role(user, roles.ADMIN, Actor.command())
    redis.Redis.from_url(settings.REDIS_URL).delete(settings.CELERY_TASK_DEFAULT_QUEUE)  # no stale wake-ups
    tag = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sshd, sshd_port, key_dir, host_key = start_sshd(work)
        workers: list[tuple[subprocess.Popen, Path]] = []
        hosts = _make_hosts(work, host_count + 1, tag, sshd_port, key_dir, host_key, load_seconds)
        try:
            workers = _start_workers(work, workers_count, slots, key_dir)
            anchor = _phase("anchor", hosts[:1], launches, user, workers, timeout=600)
            crowd = _phase("crowd", hosts[1:], launches, user, workers, timeout=1800)
        finally:
            for process, _ in workers:
                _stop(process)
            for i in range(host_count + 1):
                for pid in hostsetup.processes_of(work / f"state-{tag}-{i}"):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            sshd.terminate()
            sshd.wait()
    total = workers_count * slots
    print(f"{workers_count} worker process(es) x {slots} slots = {total} slots; {host_count} hosts x {launches} "
          f"launches; SIMHOST_LOAD_SECONDS={load_seconds:g}; {os.cpu_count()} CPUs")  # fmt: skip
    anchor_figures, crowd_figures = _figures(anchor), _figures(crowd)
    _report("anchor (1 host)", anchor, anchor_figures, total)
    _report(f"crowd ({host_count} hosts)", crowd, crowd_figures, total)
    if anchor_figures["overhead"] and crowd_figures["overhead"]:
        ratio = crowd_figures["overhead"]["p95"] / anchor_figures["overhead"]["p95"]
        print(f"overhead p95 with {host_count} hosts / with 1: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="worker processes (as on that many machines)")
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--slots", type=int, default=None, help="slots per worker (default: ceil(hosts / workers))")
    parser.add_argument("--launches", type=int, default=2, help="runs per host, one after the other")
    parser.add_argument("--load-seconds", type=float, default=1.0, help="SIMHOST_LOAD_SECONDS of every host")
    args = parser.parse_args()
    bench(args.workers, args.hosts, args.slots, args.launches, args.load_seconds)


if __name__ == "__main__":
    main()
