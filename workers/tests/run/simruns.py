"""Runs on the simulated host for the lifecycle tests: configs of its models, a queued run, and what the host
holds afterwards (its log file, its GPU memory)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from experiments.actions.audit import Actor
from experiments.actions.experiments import do_create_experiment
from experiments.models import BenchmarkProfile, Host, Run, ServerConfig
from simhost.hostsetup import REPO

SMALL_PROFILE = dict(
    concurrency=[1], num_prompts=2, input_len=32, output_len=16, stall_timeout_s=20, readiness_timeout_s=60
)


def sim_config(host: Host, name: str = "cfg", *, speculative: bool = False, **fields) -> ServerConfig:
    """An unsaved config of the simulated target (tp 2), EAGLE-3 with its draft when `speculative`."""
    models = host.models_root
    spec = {}
    if speculative:
        spec = dict(
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=f"{models}/kimi-k2.5-sim-eagle3",
            speculative_num_steps=2,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=3,
        )
    return ServerConfig(name=name, **{"model_path": f"{models}/kimi-k2.5-sim", "tp_size": 2, **spec, **fields})


def queue_run(host: Host, config: ServerConfig, owner, *, name: str = "lifecycle", **profile_fields) -> Run:
    """The one queued run of a new experiment of `config` alone (a small profile unless overridden)."""
    profile = BenchmarkProfile(name="p", **{**SMALL_PROFILE, **profile_fields})
    experiment = do_create_experiment(
        actor=Actor(owner), name=name, host=host, baseline=config, candidates=[], profile=profile
    )
    return experiment.run_set.get()


def wait_for_state(run: Run, states: set[str], timeout: float) -> None:
    """Until the run is in one of `states`; a run that ends elsewhere fails the wait at once, saying why."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.state in states:
            return
        if run.is_finished:
            break
        time.sleep(0.2)
    why = f": {run.failure_kind} {run.failure_message[:300]}" if run.failure_kind else ""
    raise AssertionError(f"run {run.pk} is {run.state}, not in {states} after {timeout} s{why}")


def lines_on_host(run: Run) -> list[str]:
    """The host's log file as lines, a carriage-return rewrite (a progress bar) keeping its last state."""
    text = Path(run.log_path).read_bytes().decode("utf-8", errors="replace")
    return [raw.rstrip("\r").rsplit("\r", 1)[-1] for raw in text.split("\n")[:-1]]


def held_gpu_memory(host: Host) -> str:
    """What the simulated host's nvidia-smi says is held (empty when the GPUs are free)."""
    env = {**os.environ, "SIMHOST_STATE_DIR": str(host.state_dir)}  # type: ignore[attr-defined]
    shim = Path(REPO) / "simhost" / "bin" / "nvidia-smi"
    query = [str(shim), "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
    return subprocess.run(query, env=env, capture_output=True, text=True, check=True).stdout.strip()
