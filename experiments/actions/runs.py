"""A run's life as its orchestrator records it: claimed, advanced, facts and log stored, failed, cancelled."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from experiments.live import broadcast

from ..analysis import launch_estimates
from ..models import AuditEvent, Candidate, Experiment, Host, LogChunk, Run, ServerConfig
from ..remedies import Remedy, RemedyRefused
from ..rules import config_names
from .audit import Actor, record_event
from .confirmations import queue_confirmation_again
from .experiments import queue_runs
from .hosts import do_release_host, lock_host_row
from .notifications import notify_if_experiment_ended
from .prompts import do_record_equivalence
from .study_rounds import advance_study_of_run


@transaction.atomic
def do_cancel_run(run: Run, actor: Actor) -> bool:
    """Ask for a run to stop. A queued run is cancelled at once; a live one by its orchestrator (with teardown)."""
    if _cancel_queued_run(run, cancel_requested=True):
        _run_ended(run)
        transaction.on_commit(lambda: broadcast.send_queue_state(run.host_id))  # the runs behind it moved up
    else:
        updated = Run.objects.filter(pk=run.pk, cancel_requested=False).exclude(state__in=Run.TERMINAL_STATES)
        if updated.update(cancel_requested=True) != 1:
            return False
        run.refresh_from_db()
    record_event(actor, AuditEvent.Action.CANCEL, run, state=run.state)
    transaction.on_commit(lambda: broadcast.send_run_state(run))
    return True


def _append_timeline(run: Run, state: str) -> None:
    run.timeline = [*run.timeline, {"state": state, "at": timezone.now().isoformat()}]
    run.save(update_fields=["timeline"])


@transaction.atomic
def do_claim_next_run(host_id: int, worker: str) -> Run | None:
    """Take the host lock for its oldest queued run, or return None if the host is busy, dirty or idle."""
    lock_host_row(host_id)
    # A run another transaction holds is being cancelled or skipped with its round: take the next one instead of
    # waiting for it (and finding it gone).
    waiting = Run.objects.queued().on_host(host_id).filter(cancel_requested=False).in_claim_order()
    run = waiting.select_for_update(no_key=True, skip_locked=True, of=("self",)).first()
    if run is None:
        return None
    locked = Host.objects.filter(pk=host_id, active_run__isnull=True, is_dirty=False).update(active_run=run)
    if locked != 1:
        return None
    # The conditional UPDATE on the run closes the race with a cancel that came in meanwhile.
    now = timezone.now()
    claimed = Run.objects.filter(pk=run.pk, state=Run.State.QUEUED).update(
        state=Run.State.CONNECTING, worker=worker, heartbeat_at=now, started_at=now
    )
    if claimed != 1:
        Host.objects.filter(pk=host_id, active_run=run).update(active_run=None)
        return None
    run.refresh_from_db()
    _append_timeline(run, Run.State.CONNECTING)
    transaction.on_commit(lambda: broadcast.send_run_state(run))
    transaction.on_commit(lambda: broadcast.send_queue_state(host_id))  # each queued run moved up
    return run


@transaction.atomic
def do_abandon_run(run: Run, message: str) -> None:
    """Last resort when the orchestrator itself could not run: fail the run and free its host."""
    lock_host_row(run.host_id)
    run.refresh_from_db()
    if not run.is_finished:
        do_record_failure(run, Run.FailureKind.INTERNAL, message)
        do_advance_run(run, Run.State.FAILED)
    do_release_host(run)


@transaction.atomic
def do_advance_run(run: Run, state: str, *, measured: bool = False, **facts: Any) -> None:
    """Move a live run to its next state, storing the facts learnt on the way (pid, args, ...). `measured`: the
    worker that drove the run ends it here, having timed every phase (its success): its phases are recorded as the
    history the estimates learn from."""
    for field, value in facts.items():
        setattr(run, field, value)
    run.state = state
    run.heartbeat_at = timezone.now()
    if state in Run.TERMINAL_STATES:
        run.finished_at = run.heartbeat_at
    run.timeline = [*run.timeline, {"state": state, "at": run.heartbeat_at.isoformat()}]
    if measured:
        run.measured_phases = _measured_phases(run)
        facts = {**facts, "measured_phases": run.measured_phases}
    run.save(update_fields=["state", "heartbeat_at", "finished_at", "timeline", *facts])
    transaction.on_commit(lambda: broadcast.send_run_state(run))
    if state in Run.TERMINAL_STATES:
        _run_ended(run)


def _measured_phases(run: Run) -> dict[str, Any] | None:
    """The run's phases as its timeline and its cells' ends split them (None: a cell has no end to split at)."""
    profile = run.experiment.profile
    ended = run.measurement_set.values_list("pass_index", "concurrency", "ended_at")
    ends = {(pass_index, concurrency): at for pass_index, concurrency, at in ended}
    cell_ends = [ends.get(cell) for cell in profile.benchmark_cells()]
    cells = profile.launch_kind(config="", model="").cells
    return launch_estimates.measured_phases(run.timeline, cell_ends, cells, run.profile_requested)


def _run_ended(run: Run) -> None:
    """What a run's end sets off, however it ended (its orchestrator's last state, or a cancel while it was queued),
    in the transaction that records the end."""
    if run.state in (Run.State.FAILED, Run.State.CANCELLED):
        _skip_round_without_baseline(run)
    if run.state == Run.State.FAILED:
        queue_confirmation_again(run)
    if run.state == Run.State.SUCCEEDED:
        do_record_equivalence(run.experiment)
    # The study first: a round that ends it tells its recommendation in the round's own message.
    advance_study_of_run(run)
    notify_if_experiment_ended(run.experiment_id)


def _skip_round_without_baseline(run: Run) -> None:
    """Cancel the queued candidate runs of a round whose baseline run ended without a measurement: they would
    occupy the host for a comparison that cannot be made (unless the experiment asks to run them anyway)."""
    experiment = run.experiment
    if run.config_id != experiment.baseline_id or experiment.run_candidates_without_baseline:
        return
    if run.measurement_set.exists():
        return  # measured, then failed in teardown: the round still has its baseline
    what = "failed" if run.state == Run.State.FAILED else "was cancelled"
    reason = (
        f"Skipped: the baseline run {run.pk} of launch {run.launch_index + 1} {what}, so there is nothing to "
        f"compare this run with. Re-run the experiment once the baseline launches, or set "
        f"“run candidates without a baseline” on the experiment."
    )
    round_runs = Run.objects.queued().filter(experiment=experiment, launch_index=run.launch_index)
    for skipped in round_runs.exclude(config_id=experiment.baseline_id):
        if _cancel_queued_run(skipped, cancel_reason=reason):
            transaction.on_commit(functools.partial(broadcast.send_run_state, skipped))


def _cancel_queued_run(run: Run, **fields: Any) -> bool:
    """Cancel `run` if it is still queued (a conditional UPDATE: a worker's claim that came first wins)."""
    cancelled = Run.objects.filter(pk=run.pk, state=Run.State.QUEUED).update(
        state=Run.State.CANCELLED, finished_at=timezone.now(), **fields
    )
    if cancelled:
        run.refresh_from_db()
        _append_timeline(run, Run.State.CANCELLED)
    return bool(cancelled)


@transaction.atomic
def do_claim_config_check(run: Run) -> list[ServerConfig] | None:
    """Take the experiment's one check of all its configs before its first launch (None: another run has it),
    returning the configs other than `run`'s that still have queued runs."""
    claimed = Experiment.objects.filter(pk=run.experiment_id, configs_checked_at__isnull=True).update(
        configs_checked_at=timezone.now()
    )
    if claimed != 1:
        return None
    config_ids = (
        Run.objects.queued().filter(experiment_id=run.experiment_id).exclude(config_id=run.config_id)
    ).values_list("config_id", flat=True)
    return list(ServerConfig.objects.filter(pk__in=config_ids).order_by("pk"))


@transaction.atomic
def do_fail_config_in_preflight(experiment_id: int, config_id: int, problem: str) -> int:
    """Fail the queued runs of a config that the experiment's first preflight found could not launch."""
    runs = Run.objects.queued().filter(experiment_id=experiment_id, config_id=config_id)
    failed = 0
    for run in runs.select_related("config"):
        if not Run.objects.filter(pk=run.pk, state=Run.State.QUEUED).update(state=Run.State.PREFLIGHT):
            continue  # claimed meanwhile: its own preflight will say the same
        run.refresh_from_db()
        _append_timeline(run, Run.State.PREFLIGHT)
        do_record_failure(run, Run.FailureKind.PREFLIGHT, f"Checked before the experiment's first launch: {problem}")
        do_advance_run(run, Run.State.FAILED)
        failed += 1
    return failed


@transaction.atomic
def do_update_run(run: Run, *, notify: bool = True, **facts: Any) -> None:
    """Store facts of a live run without a state change (progress, pids, heartbeat)."""
    for field, value in facts.items():
        setattr(run, field, value)
    run.heartbeat_at = timezone.now()
    run.save(update_fields=["heartbeat_at", *facts])
    if notify:
        transaction.on_commit(lambda: broadcast.send_run_state(run))


@transaction.atomic
def do_record_failure(run: Run, kind: str, message: str, excerpt: str = "", first_line: int | None = None) -> None:
    """Remember why a run failed; the first failure wins (later ones are consequences of it)."""
    if run.failure_kind:
        return
    run.failure_kind = kind
    run.failure_message = message[:4000]
    run.failure_excerpt = excerpt[:20000]
    run.failure_first_line = first_line
    run.save(update_fields=["failure_kind", "failure_message", "failure_excerpt", "failure_first_line"])


@transaction.atomic
def do_add_run_warning(
    run: Run,
    kind: str,
    message: str,
    *,
    line: int | None = None,
    text: str = "",
    remedies: list[dict[str, Any]] | None = None,
) -> None:
    """Note on the run something that went wrong without failing it (once per kind and message); `line` and `text`:
    the server log line it came from; `remedies`: what to try, in the shape of a failure's (`Remedy.as_json`)."""
    run.refresh_from_db(fields=["warnings"])
    if any(w.get("kind") == kind and w.get("message") == message for w in run.warnings):
        return
    warning: dict[str, Any] = {"kind": kind, "message": message[:2000], "at": timezone.now().isoformat()}
    if line is not None:
        warning.update(line=line, text=text[:1000])
    if remedies:
        warning["remedies"] = remedies
    run.warnings = [*run.warnings, warning]
    run.save(update_fields=["warnings"])
    transaction.on_commit(lambda: broadcast.send_run_state(run))


def do_heartbeat(run: Run, worker: str) -> bool:
    """Say this worker still drives the run; False when another worker has taken it over meanwhile."""
    now = timezone.now()
    if Run.objects.filter(pk=run.pk, worker=worker).update(heartbeat_at=now) != 1:
        return False
    run.heartbeat_at = now
    return True


@transaction.atomic
def do_take_over_run(run_id: int, worker: str, stale_after: timedelta) -> Run | None:
    """Re-attach a live run whose worker stopped beating (died, or lost its network) to `worker`."""
    now = timezone.now()
    taken = (
        Run.objects.active()
        .filter(pk=run_id, heartbeat_at__lt=now - stale_after)
        .update(worker=worker, heartbeat_at=now)
    )
    if taken != 1:
        return None
    return Run.objects.select_related("host").get(pk=run_id)


def do_append_log(
    run: Run, first_line: int, lines: list[str], new_offset: int, *, notify: bool = False, **facts: Any
) -> None:
    """Store a batch of complete log lines and the byte offset after them, at once, with the facts read from them
    (`facts`: fields of the run such as its loading progress and live series; `notify`: push the run's new state
    to its pages): a flood's batch then costs one write, not two.

    The unique (run, first_line) constraint plus the conditional update of `log_lines` make a replayed batch
    (after a worker re-attached) fail loudly instead of duplicating lines; and only the worker driving the run
    stores: one whose run was taken over (it lost the database, then came back) is refused, whatever it had read.
    """
    if not lines:
        return
    if not LogChunk.objects.append(run, first_line, lines, new_offset, heartbeat_at=timezone.now(), **facts):
        if not Run.objects.filter(pk=run.pk, worker=run.worker).exists():
            raise ValueError(f"run {run.pk} is driven by another worker now: its log batch is not stored")
        raise ValueError(f"log batch for run {run.pk} starts at line {first_line}, not after the stored lines")
    run.log_lines = first_line - 1 + len(lines)
    run.log_offset = new_offset
    for field, value in facts.items():
        setattr(run, field, value)
    if notify:
        transaction.on_commit(lambda: broadcast.send_run_state(run))


def do_advance_log(run: Run, new_offset: int, *, notify: bool = False, **facts: Any) -> None:
    """Past the run's log cap (`Run.log_cut_line` set): move its log position past lines read and not stored, with
    the facts read from them (its live series goes on), so a worker that re-attaches reads on from there. Only the
    worker driving the run moves it, and never backwards."""
    moved = Run.objects.filter(
        pk=run.pk, worker=run.worker, log_cut_line__isnull=False, log_offset__lte=new_offset
    ).update(log_offset=new_offset, heartbeat_at=timezone.now(), **facts)
    if not moved:
        raise ValueError(f"run {run.pk}: its log position is not this worker's to move, or its log is not cut")
    run.log_offset = new_offset
    for field, value in facts.items():
        setattr(run, field, value)
    if notify:
        transaction.on_commit(lambda: broadcast.send_run_state(run))


# ---- re-running a failed run with a remedy -------------------------------------------------------------------

CONFIG_NAME_MAX = ServerConfig._meta.get_field("name").max_length or 128


@transaction.atomic
def do_rerun_with_remedy(
    run: Run, remedy: Remedy, config: ServerConfig, actor: Actor
) -> tuple[ServerConfig, list[Run]]:
    """Re-run a failed run's config with one of its remedies, `config` (the new version with the change, validated
    and unsaved: `forms.remedies.remedied_config`): linked to the failure, in the old one's place in the experiment
    (beside it if the old one has results; the old one's queued launches are cancelled once it is replaced), queued
    interleaved with what it is compared with (the baseline; for a new baseline, every candidate) as many launches as
    the profile asks. Raises RemedyRefused for a config no longer compared or a version already there, and
    QuotaExceeded past the quotas (nothing saved)."""
    assert remedy.change is not None, "a remedy that changes the config (remedied_config refuses advice)"
    # One remedy at a time per experiment: the same one clicked twice makes one version.
    experiment = Experiment.objects.select_for_update().select_related("host", "profile").get(pk=run.experiment_id)
    run = Run.objects.select_related("config", "host", "experiment__profile").get(pk=run.pk)
    old = run.config
    compared = [experiment.baseline, *experiment.ordered_candidates()]
    if old not in compared:
        raise RemedyRefused(f"{old.name} is no longer compared in this experiment (a newer version took its place).")
    same = next((c for c in compared if c.content_hash == config.compute_hash()), None)
    if same is not None:
        raise RemedyRefused(f"{same.name} already runs this config in the experiment.")
    config.name = config_names.free_name(config.name, {c.name for c in compared}, CONFIG_NAME_MAX)
    config.created_by = actor.user if actor.user is not None and actor.user.is_authenticated else None
    config.derived_from, config.remedy_for_run = old, run
    config.save()
    queued_with = _place_version(experiment, old, config)
    if old.pk not in {experiment.baseline_id, *experiment.candidate_set.values_list("config_id", flat=True)}:
        # Replaced: its launches still queued would only repeat the failure the new version answers.
        for queued in experiment.run_set.queued().filter(config=old):
            do_cancel_run(queued, actor)
    last_sequence, last_launch = experiment.run_set.order_by("-sequence").values_list("sequence", "launch_index")[0]
    # Held to the quotas like a re-run (`queue_runs`); on a refusal the atomic block undoes the new version too.
    runs = queue_runs(
        experiment,
        queued_with,
        experiment.profile.launches,
        actor=actor,
        first_sequence=last_sequence + 1,
        first_launch=last_launch + 1,
    )
    record_event(
        actor,
        AuditEvent.Action.REMEDY,
        run,
        remedy=remedy.id,
        change=remedy.change.describe(),
        config=config.pk,
        config_name=config.name,
        runs=[r.pk for r in runs],
    )
    return config, runs


def _place_version(experiment: Experiment, old: ServerConfig, new: ServerConfig) -> list[ServerConfig]:
    """Put the new version where the old one is compared; the configs to queue: it and its baseline, or for a new
    baseline, it and every candidate (a comparison needs both sides measured in the same stretch of time)."""
    if experiment.baseline_id == old.pk:
        experiment.baseline = new
        experiment.save(update_fields=["baseline"])
        return [new, *experiment.ordered_candidates()]
    if experiment.run_set.filter(config=old, state=Run.State.SUCCEEDED).exists():
        # It has results: they stay in the comparison, beside the new version's.
        last = experiment.candidate_set.order_by("-position").values_list("position", flat=True)[0]
        Candidate.objects.create(experiment=experiment, config=new, position=last + 1)
    else:
        experiment.candidate_set.filter(config=old).update(config=new)
    return [experiment.baseline, new]
