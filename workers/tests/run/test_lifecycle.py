"""The run lifecycle against a real sshd and the simulated host's faults: every failure is detected, classified
with the lines that prove it, and cleaned up. Runs are driven through the task entry point, in-process."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from experiments.actions.audit import Actor
from experiments.actions.runs import do_cancel_run, do_claim_next_run
from experiments.models import Host, Run
from workers.tasks import drive_host
from workers.tests.run.simruns import held_gpu_memory, lines_on_host, queue_run, sim_config, wait_for_state

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_queue"),
]


def _drive(run: Run) -> Run:
    drive_host(run.host_id)
    run.refresh_from_db()
    return run


def test_it_succeeds_and_leaves_the_gpus_free(sim_host, owner):
    run = _drive(queue_run(sim_host, sim_config(sim_host), owner))

    assert run.state == Run.State.SUCCEEDED, run.failure()
    assert [p["state"] for p in run.phases()] == [str(s) for s in Run.LIFECYCLE]
    assert run.measurement_set.count() == 1
    # Each request's own latencies and the cell's window on the worker's clock: what goodput and energy read.
    cell = run.measurement_set.get()
    assert len(cell.requests) == cell.completed and all(r["ok"] and r["ttft_ms"] > 0 for r in cell.requests)
    assert cell.ended_at is not None and run.finished_at is not None and cell.ended_at <= run.finished_at
    assert "\n".join(c.text for c in run.logchunk_set.order_by("first_line")).split("\n") == lines_on_host(run)
    assert held_gpu_memory(sim_host) == ""
    sim_host.refresh_from_db()
    assert sim_host.active_run_id is None and not sim_host.is_dirty


def test_it_fails_a_zombie_that_loads_and_never_serves(sim_host, owner):
    config = sim_config(sim_host, env={"SIMHOST_FAULTS": "zombie"})

    run = _drive(queue_run(sim_host, config, owner, stall_timeout_s=3))

    assert run.failure_kind == Run.FailureKind.ZOMBIE
    assert "has not answered" in run.failure_message
    assert run.failure_excerpt
    assert held_gpu_memory(sim_host) == ""


def test_it_reports_a_crash_on_the_first_request_with_its_traceback(sim_host, owner):
    config = sim_config(sim_host, env={"SIMHOST_FAULTS": "crash_on_first_request"})

    run = _drive(queue_run(sim_host, config, owner))

    assert run.failure_kind == Run.FailureKind.CRASHED
    assert "AttributeError" in run.failure_message
    assert "Traceback (most recent call last)" in run.failure_excerpt
    assert run.failure_first_line and run.failure_first_line > 1
    assert held_gpu_memory(sim_host) == ""


def test_it_finishes_a_run_whose_server_survived_a_traceback_during_warm_up(sim_host, owner):
    config = sim_config(sim_host, env={"SIMHOST_FAULTS": "warmup_exception"})

    run = _drive(queue_run(sim_host, config, owner))

    assert run.state == Run.State.SUCCEEDED, run.failure()
    assert "Exception in ASGI application" in "\n".join(c.text for c in run.logchunk_set.all())
    assert [w["kind"] for w in run.warnings] == ["survived_traceback"]
    assert held_gpu_memory(sim_host) == ""


def test_it_reports_cuda_oom_during_graph_capture(sim_host, owner):
    config = sim_config(sim_host, env={"SIMHOST_FAULTS": "oom_capture"})

    run = _drive(queue_run(sim_host, config, owner))

    assert run.failure_kind == Run.FailureKind.OOM
    assert "out of memory" in run.failure_excerpt.lower() or "Capture cuda graph failed" in run.failure_excerpt
    assert held_gpu_memory(sim_host) == ""


def test_it_refuses_a_short_context_draft_in_preflight_naming_the_override(sim_host, owner):
    config = sim_config(
        sim_host, speculative=True, speculative_draft_model_path=f"{sim_host.models_root}/kimi-k2.5-sim-eagle3-ctx131k"
    )

    run = _drive(queue_run(sim_host, config, owner))

    assert run.failure_kind == Run.FailureKind.PREFLIGHT
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in run.failure_message
    assert run.log_lines == 0  # nothing was launched


def test_it_reports_env_vars_that_did_not_reach_the_scheduler_processes(sim_host, owner):
    config = sim_config(
        sim_host,
        env={"NCCL_PROTO": "LL", "SIMHOST_FAULTS": "env_drop"},
        expect={"env_propagated": ["NCCL_PROTO"]},
    )

    run = _drive(queue_run(sim_host, config, owner))

    assert run.failure_kind == Run.FailureKind.ENV_NOT_PROPAGATED
    assert "NCCL_PROTO missing in pid" in run.failure_message
    assert "sglang::scheduler" in run.failure_message
    assert held_gpu_memory(sim_host) == ""


def test_it_reports_a_server_arg_that_differs_from_the_expectation(sim_host, owner):
    config = sim_config(sim_host, speculative=True, expect={"server_args": {"disable_overlap_schedule": False}})

    run = _drive(queue_run(sim_host, config, owner))

    # SGLang 0.5.9 turns the overlap scheduler off for EAGLE3 unless SGLANG_ENABLE_SPEC_V2 is set.
    assert run.failure_kind == Run.FailureKind.MISCONFIGURED
    assert "disable_overlap_schedule" in run.failure_message


def test_it_passes_the_same_expectation_when_spec_v2_is_enabled(sim_host, owner):
    config = sim_config(
        sim_host,
        speculative=True,
        env={"SGLANG_ENABLE_SPEC_V2": "True"},
        expect={"server_args": {"disable_overlap_schedule": False}, "log_contains": ["Spec v2 is enabled"]},
    )

    run = _drive(queue_run(sim_host, config, owner))

    assert run.state == Run.State.SUCCEEDED, run.failure()


def test_it_marks_the_host_dirty_when_gpu_memory_stays_held(sim_host, owner):
    run = _drive(queue_run(sim_host, sim_config(sim_host, env={"SIMHOST_FAULTS": "leak"}), owner))

    assert run.failure_kind == Run.FailureKind.TEARDOWN_INCOMPLETE
    assert "still holds" in run.failure_message
    sim_host.refresh_from_db()
    assert sim_host.is_dirty and "MiB" in sim_host.dirty_reason
    # No run starts on a dirty host until someone cleans it.
    queued = queue_run(sim_host, sim_config(sim_host, name="next"), owner)
    assert do_claim_next_run(sim_host.pk, "test") is None
    queued.refresh_from_db()
    assert queued.state == Run.State.QUEUED


def test_it_kills_a_server_that_ignores_sigterm(sim_host, owner, settings):
    settings.SPECDASH_TEARDOWN_GRACE = 1
    run = _drive(queue_run(sim_host, sim_config(sim_host, env={"SIMHOST_FAULTS": "ignore_sigterm"}), owner))

    assert run.state == Run.State.SUCCEEDED, run.failure()
    assert held_gpu_memory(sim_host) == ""


def test_it_waits_through_health_checks_that_answer_503_after_ready(sim_host, owner):
    config = sim_config(sim_host, env={"SIMHOST_FAULTS": "health_flaky", "SIMHOST_FLAKY_SECONDS": "2"})

    run = _drive(queue_run(sim_host, config, owner))

    assert run.state == Run.State.SUCCEEDED, run.failure()


def test_it_times_out_a_server_that_is_still_loading(sim_host, owner):
    config = sim_config(sim_host, env={"SIMHOST_LOAD_SECONDS": "60"})

    run = _drive(queue_run(sim_host, config, owner, readiness_timeout_s=3))

    assert run.failure_kind == Run.FailureKind.READINESS_TIMEOUT
    assert held_gpu_memory(sim_host) == ""


def test_it_fails_a_benchmark_whose_requests_time_out(sim_host, owner):
    run = _drive(queue_run(sim_host, sim_config(sim_host), owner, output_len=2000, request_timeout_s=1))

    assert run.failure_kind == Run.FailureKind.BENCHMARK_FAILED, run.failure()
    assert "requests failed" in run.failure_message or "failed" in run.failure_message
    assert held_gpu_memory(sim_host) == ""


def test_it_never_connects_to_a_host_whose_key_changed(sim_host, owner):
    sim_host.host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHs7ba7Xk4mfw5fN8bFJfVw0vM8Cq0rW6jAa0l4n7sYt"
    sim_host.save()

    run = _drive(queue_run(sim_host, sim_config(sim_host), owner))

    assert run.failure_kind == Run.FailureKind.SSH
    assert "does not match the pinned key" in run.failure_message


def test_it_reports_an_unreachable_host(sim_host, owner):
    sim_host.port = 1  # nothing listens there
    sim_host.save()

    run = _drive(queue_run(sim_host, sim_config(sim_host), owner))

    assert run.failure_kind == Run.FailureKind.SSH
    assert "Cannot reach" in run.failure_message


# Each phase the run can be held in: loading (slow weights), warming (health answers 503 for a while after the
# server started), benchmarking (long outputs). The others last a moment.
HELD_IN = {
    Run.State.LOADING: {"SIMHOST_LOAD_SECONDS": "30"},
    Run.State.WARMING: {"SIMHOST_FAULTS": "health_flaky", "SIMHOST_FLAKY_SECONDS": "60"},
    Run.State.BENCHMARKING: {},
}


@pytest.mark.parametrize("phase", list(HELD_IN))
def test_it_cancels_a_live_run_and_tears_its_server_down(sim_host, owner, phase):
    env = HELD_IN[phase]
    run = queue_run(sim_host, sim_config(sim_host, env=env), owner, output_len=3000, request_timeout_s=120)
    driver = threading.Thread(target=drive_host, args=(sim_host.pk,))
    driver.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.state == phase:
            break
        time.sleep(0.2)
    assert run.state == phase

    cancelled_at = time.monotonic()
    assert do_cancel_run(run, Actor.command())
    driver.join(timeout=60)

    run.refresh_from_db()
    assert run.state == Run.State.CANCELLED, (run.failure_kind, run.failure_message, run.phases())
    # Under the SIGTERM grace (10 s): the benchmark client is stopped and the server, as SGLang does, aborts the
    # requests whose client went away instead of draining them until SIGKILL.
    assert time.monotonic() - cancelled_at < 10, run.phases()
    assert [p["state"] for p in run.phases()][-2:] == ["teardown", "cancelled"]
    assert held_gpu_memory(sim_host) == ""


def test_it_cancels_a_run_whose_phase_swallowed_the_first_cancellation(sim_host, owner, monkeypatch):
    # Python 3.11's asyncio.wait_for returns its future's result when a cancellation arrives as that future
    # completes: the cancel is lost. Verification that swallows one cancel stands in for that race, made certain.
    import asyncio

    from workers.run import lifecycle

    swallowed = []

    async def verify_that_swallows_a_cancel(session):
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError:
            swallowed.append(True)
        await asyncio.sleep(120)

    monkeypatch.setattr(lifecycle.verify, "verify", verify_that_swallows_a_cancel)
    run = queue_run(sim_host, sim_config(sim_host), owner)
    driver = threading.Thread(target=drive_host, args=(sim_host.pk,))
    driver.start()
    wait_for_state(run, {Run.State.READY}, timeout=60)
    cancelled_at = time.monotonic()
    assert do_cancel_run(run, Actor.command())
    driver.join(timeout=60)

    run.refresh_from_db()
    assert swallowed
    assert run.state == Run.State.CANCELLED, (run.failure_kind, run.failure_message, run.phases())
    assert time.monotonic() - cancelled_at < 15, run.phases()
    assert held_gpu_memory(sim_host) == ""


def test_it_refuses_to_launch_on_busy_gpus_naming_who_holds_them(sim_host, owner):
    first = queue_run(sim_host, sim_config(sim_host, env={"SIMHOST_FAULTS": "zombie"}), owner, stall_timeout_s=60)
    driver = threading.Thread(target=drive_host, args=(sim_host.pk,))
    driver.start()
    try:
        deadline = time.monotonic() + 30
        while held_gpu_memory(sim_host) == "" and time.monotonic() < deadline:
            time.sleep(0.2)
        holder = held_gpu_memory(sim_host).splitlines()[0].split(",")[0]
        # A second host row for the same machine: its run must see the first run's server on the GPUs.
        twin = Host.objects.create(
            **{f.name: getattr(sim_host, f.name) for f in Host._meta.concrete_fields if f.name not in ("id", "name")},
            name=f"{sim_host.name}-twin",
        )
        twin.active_run = None
        twin.save()
        busy = _drive(queue_run(twin, sim_config(twin, name="second"), owner))
    finally:
        do_cancel_run(first, Actor.command())
        driver.join(timeout=60)

    assert busy.failure_kind == Run.FailureKind.PREFLIGHT
    assert f"pid {holder} holds" in busy.failure_message
    assert busy.log_lines == 0


def test_it_refuses_a_port_that_is_taken(sim_host, owner):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", sim_host.server_port))
        taken.listen()
        run = _drive(queue_run(sim_host, sim_config(sim_host), owner))

    assert run.failure_kind == Run.FailureKind.PREFLIGHT
    assert f"Port {sim_host.server_port}" in run.failure_message


def test_it_refuses_a_model_path_without_a_config_saying_no_more_than_not_found(sim_host, owner):
    missing = f"{sim_host.models_root}/no-such-model"
    run = _drive(queue_run(sim_host, sim_config(sim_host, model_path=missing), owner))

    assert run.failure_kind == Run.FailureKind.PREFLIGHT
    not_found = f"The target model path {missing} is not found under the models root on {sim_host.name}."
    assert run.failure_message == not_found
    assert not run.log_path or not Path(run.log_path).exists()  # nothing was launched


def test_it_refuses_a_symlink_out_of_the_models_root_as_not_found(sim_host, owner, tmp_path):
    # A member's attack through a link an admin did not mean: inside the root, pointing at a model elsewhere.
    root = tmp_path / "models"
    root.mkdir()
    (root / "kimi-k2.5-sim").symlink_to(Path(sim_host.models_root) / "kimi-k2.5-sim")
    sim_host.models_root = str(root)
    sim_host.save(update_fields=["models_root"])

    run = _drive(queue_run(sim_host, sim_config(sim_host), owner))

    assert run.failure_kind == Run.FailureKind.PREFLIGHT
    assert "is not found under the models root" in run.failure_message
    assert str(sim_host.models_root) not in run.failure_message.replace(f"{root}/kimi-k2.5-sim", "")
    assert not run.log_path or not Path(run.log_path).exists()
    assert held_gpu_memory(sim_host) == ""


def test_it_fails_a_config_the_server_rejects_with_sglangs_own_message(sim_host, owner):
    # An allowed flag that this (0.5.9) SGLang does not know yet: it came with 0.5.14's arg groups.
    run = _drive(queue_run(sim_host, sim_config(sim_host, extra_args=["--cuda-graph-max-bs-prefill", "3"]), owner))

    assert run.failure_kind == Run.FailureKind.MISCONFIGURED
    assert run.failure_message == "unrecognized arguments: --cuda-graph-max-bs-prefill 3"
    assert "usage:" in run.failure_excerpt
    assert held_gpu_memory(sim_host) == ""


def test_it_fails_the_smoke_test_of_a_server_that_cannot_generate(sim_host, owner):
    run = _drive(queue_run(sim_host, sim_config(sim_host, env={"SIMHOST_FAULTS": "reject_requests"}), owner))

    assert run.failure_kind == Run.FailureKind.SMOKE_FAILED
    assert "HTTP 500" in run.failure_message and "generation failed" in run.failure_message
    assert held_gpu_memory(sim_host) == ""


def test_it_reports_the_servers_context_length_error_when_preflight_reads_the_config_differently(
    sim_host, owner, tmp_path
):
    # A draft whose config.json says two things: the nested text_config (what preflight reads, as for multimodal
    # models) matches the target, the top-level field (what this server derives its context from) does not.
    import json
    import shutil

    root = tmp_path / "models"  # the host's own models root, holding the odd draft beside a copy of the target
    shutil.copytree(Path(sim_host.models_root) / "kimi-k2.5-sim", root / "kimi-k2.5-sim")
    draft = root / "draft-nested"
    shutil.copytree(Path(sim_host.models_root) / "kimi-k2.5-sim-eagle3", draft)
    sim_host.models_root = str(root)
    sim_host.save(update_fields=["models_root"])
    config = json.loads((draft / "config.json").read_text())
    config["text_config"] = {"max_position_embeddings": 262144, "vocab_size": config["vocab_size"]}
    config["max_position_embeddings"] = 131072
    (draft / "config.json").write_text(json.dumps(config))

    run = _drive(
        queue_run(sim_host, sim_config(sim_host, speculative=True, speculative_draft_model_path=str(draft)), owner)
    )

    assert run.failure_kind == Run.FailureKind.CONTEXT_LENGTH
    assert "context_length (262144) is greater than the derived context_length (131072)" in run.failure_message
    assert "Traceback" in run.failure_excerpt or "ValueError" in run.failure_excerpt
    assert held_gpu_memory(sim_host) == ""
