"""A run: one launch of one config (what it leaves is in measurements.py and log_chunks.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import models
from django.urls import reverse
from django.utils import timezone

from experiments.analysis import degenerate
from experiments.formats.run_facts import server_facts
from experiments.rules import launch_fields

from ..remedies import SERVER_ARG_NAMES, Evidence, Link, Remedy, remedies_for, server_args_in
from .configs import ServerConfig
from .experiments import Experiment
from .hosts import Host
from .run_states import TERMINAL_STATES, RunState


class RunQuerySet(models.QuerySet["Run"]):
    def active(self) -> RunQuerySet:
        return self.exclude(state__in=Run.TERMINAL_STATES).exclude(state=Run.State.QUEUED)

    def queued(self) -> RunQuerySet:
        return self.filter(state=Run.State.QUEUED)

    def on_host(self, host: Host | int) -> RunQuerySet:
        return self.filter(host=host)

    def in_claim_order(self) -> RunQuerySet:
        """The order workers take queued runs in: older experiments first, each in its interleaved schedule."""
        return self.order_by("experiment__created_at", "experiment_id", "sequence")

    def cancel_requested(self) -> RunQuerySet:
        return self.filter(cancel_requested=True)

    def measured(self) -> RunQuerySet:
        """Runs a worker launched and timed to their success: the only history the estimates learn from."""
        return self.filter(measured_phases__isnull=False, imported_from__isnull=True)

    def stale(self, stale_after: timedelta) -> RunQuerySet:
        """Live runs whose worker has not beaten for `stale_after`: candidates for re-attachment."""
        return self.active().filter(heartbeat_at__lt=timezone.now() - stale_after)


class Run(models.Model):
    State = RunState

    class FailureKind(models.TextChoices):
        SSH = "ssh"
        PREFLIGHT = "preflight"
        CRASHED = "crashed"
        OOM = "oom"
        HOST_OOM = "host_oom", "Host out of memory"  # the kernel's OOM killer, not GPU memory
        CONTEXT_LENGTH = "context_length"
        ZOMBIE = "zombie"
        READINESS_TIMEOUT = "readiness_timeout"
        MISCONFIGURED = "misconfigured"
        ENV_NOT_PROPAGATED = "env_not_propagated"
        SMOKE_FAILED = "smoke_failed"
        BENCHMARK_FAILED = "benchmark_failed"
        TEARDOWN_INCOMPLETE = "teardown_incomplete"
        INTERNAL = "internal"

    TERMINAL_STATES = TERMINAL_STATES
    # The order a healthy run goes through; used for the timeline and the progress display.
    LIFECYCLE = (
        State.QUEUED,
        State.CONNECTING,
        State.PREFLIGHT,
        State.LAUNCHING,
        State.LOADING,
        State.WARMING,
        State.READY,
        State.VERIFYING,
        State.BENCHMARKING,
        State.TEARDOWN,
        State.SUCCEEDED,
    )

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE)
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT)
    host = models.ForeignKey(Host, on_delete=models.PROTECT)
    sequence = models.PositiveIntegerField(help_text="Position in the experiment's interleaved schedule.")
    launch_index = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED, db_index=True)
    timeline = models.JSONField(default=list, blank=True)
    failure_kind = models.CharField(max_length=32, choices=FailureKind.choices, blank=True)
    failure_message = models.TextField(blank=True)
    failure_excerpt = models.TextField(blank=True)
    failure_first_line = models.PositiveIntegerField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    worker = models.CharField(max_length=255, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    server_port = models.PositiveIntegerField(null=True, blank=True)
    remote_pid = models.PositiveIntegerField(null=True, blank=True)
    remote_pgid = models.PositiveIntegerField(null=True, blank=True)
    remote_pids = models.JSONField(default=list, blank=True)
    log_path = models.CharField(max_length=1024, blank=True)
    log_offset = models.BigIntegerField(default=0)
    log_lines = models.PositiveIntegerField(default=0)
    # Bytes of log text stored (UTF-8, a newline a line), held to the host's `run_log_cap`; past it the log is cut:
    # `log_cut_line` is the marker line's number, and the lines after it stay on the host only.
    log_bytes = models.BigIntegerField(default=0)
    log_cut_line = models.PositiveIntegerField(null=True, blank=True)
    loading_progress = models.PositiveSmallIntegerField(null=True, blank=True)
    effective_args = models.JSONField(default=dict, blank=True)
    # The latest structured facts read from the log (Decode-batch figures, custom metrics), so a page reload
    # shows what the live stream showed.
    live_facts = models.JSONField(default=dict, blank=True)
    launch_command = models.TextField(blank=True)
    # Why a run was cancelled without anyone asking (e.g. skipped: its round's baseline failed), shown beside it.
    cancel_reason = models.TextField(blank=True)
    # What went wrong without failing the run: [{"kind", "message", "at"}], shown on the run page.
    warnings = models.JSONField(default=list, blank=True)
    # Why this run measures a degenerate benchmark (analysis/degenerate.py: check_run, as its prompt results were
    # recorded): [{"kind", "count", "total", "sentence"}], empty when healthy or not checked. The comparison keeps a
    # config with such a run out of its headline, its best row, recommendations and the CI gate.
    degenerate_findings = models.JSONField(default=list, blank=True, editable=False)
    benchmark_cell = models.PositiveIntegerField(default=0)
    # The benchmark client's own count of the current cell's requests (finished, of all), about once a second.
    cell_requests_done = models.PositiveIntegerField(default=0)
    cell_requests_total = models.PositiveIntegerField(default=0)
    # After the measured cells (never inside one), profile the server at each concurrency of the profile
    # (workers/run/profiling.py). A fact of this launch, not of the config: its hash and series stay as they are.
    profile_requested = models.BooleanField(default=False)
    # Queued by the history check to confirm a suspected change (its whole interleaved round, neighbours included).
    confirms = models.ForeignKey(
        "Suspicion", null=True, blank=True, on_delete=models.SET_NULL, related_name="confirming_runs"
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Markdown, rendered through the same sanitiser as an experiment's notes.
    notes = models.TextField(blank=True, default="")
    # A run measured outside specdash and imported from a result file (actions/imports.py): {file, tool, version,
    # command, format, lines}. Null for the runs specdash launched; an imported run has no log and no worker.
    imported_from = models.JSONField(null=True, blank=True, editable=False)
    # The SHA-256 of the imported file's bytes ("" for a launched run): a file imported again is found by it and
    # changes nothing (actions/imports.py).
    imported_sha256 = models.CharField(max_length=64, blank=True, default="", db_index=True, editable=False)
    # What each phase of the launch took, as the worker that drove it to success timed it (analysis/
    # launch_estimates.measured_phases): set by that worker alone, so null marks a run nobody measured (queued,
    # failed, seeded by the demo, imported, or ended before specdash kept it). The estimates learn from these only.
    measured_phases = models.JSONField(null=True, blank=True, editable=False)
    # The seconds on the host this launch's GPU-hours were reserved at when it was queued: the upper end of its
    # estimated length (null: queued before reservations, counted at its profile's time-outs). Once it ends, what it
    # took counts instead.
    reserved_s = models.FloatField(null=True, blank=True, editable=False)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["experiment_id", "sequence"]
        constraints = [models.UniqueConstraint(fields=["experiment", "sequence"], name="run_sequence_unique")]
        # A host's latest ended runs (the launch durations behind every queue estimate) read in order, a few
        # hundred per host, instead of every run of the host sorted.
        indexes = [models.Index(fields=["host", "state", "-finished_at"], name="run_host_state_finished")]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.config.name})"

    def get_absolute_url(self) -> str:
        return reverse("run_detail", args=[self.pk])

    @property
    def degenerate_reason(self) -> str:
        """Why the run measures a degenerate benchmark, in one sentence ("" when it does not)."""
        return degenerate.reason([degenerate.Finding.from_json(f) for f in self.degenerate_findings or []])

    @property
    def is_imported(self) -> bool:
        return self.imported_from is not None

    @property
    def imported_label(self) -> str:
        """The provenance line: "imported from <file> (<tool> <version>)"; "" for a run specdash launched."""
        if self.imported_from is None:
            return ""
        source = self.imported_from
        tool = " ".join(part for part in (source.get("tool", ""), source.get("version", "")) if part)
        return f"imported from {source.get('file', '')} ({tool})" if tool else f"imported from {source.get('file', '')}"

    @property
    def is_measured(self) -> bool:
        """Whether a worker launched this run and timed its phases to its success (never a seeded or imported one)."""
        return self.measured_phases is not None and self.imported_from is None

    @property
    def is_finished(self) -> bool:
        return self.state in self.TERMINAL_STATES

    @classmethod
    def lifecycle_index(cls, state: str) -> int:
        """Where `state` lies along the healthy lifecycle; a state off it (failed, cancelled) lies after all."""
        order = [str(s) for s in cls.LIFECYCLE]
        return order.index(state) if state in order else len(order)

    def is_before(self, state: str) -> bool:
        """Whether the run has not reached `state` yet along the healthy lifecycle."""
        return self.lifecycle_index(self.state) < self.lifecycle_index(state)

    @property
    def can_cancel(self) -> bool:
        return not self.is_finished and not self.cancel_requested

    @property
    def is_live(self) -> bool:
        return not self.is_finished and self.state != self.State.QUEUED

    def benchmark_progress(self) -> dict[str, Any] | None:
        """Where a benchmarking run is ("c=4 · pass 2/3 · 61%"): the current cell's concurrency and pass, and the
        share of the run's benchmark done, counting the current cell's finished requests. None unless benchmarking
        (so only live runs read their profile)."""
        if self.state != self.State.BENCHMARKING:
            return None
        profile = self.experiment.profile
        cells = profile.benchmark_cells()
        if not cells:
            return None
        index = min(self.benchmark_cell, len(cells) - 1)
        pass_index, concurrency = cells[index]
        total = self.cell_requests_total
        within = min(self.cell_requests_done, total) / total if total else 0.0
        percent = int(100 * (min(self.benchmark_cell, len(cells)) + within) / len(cells))
        return {
            "concurrency": concurrency,
            "pass": pass_index + 1,
            "passes": profile.passes,
            "cell": index + 1,
            "cells": len(cells),
            "requests_done": self.cell_requests_done if total else None,
            "requests": total or None,
            "percent": min(percent, 100),
            "label": f"c={concurrency} · pass {pass_index + 1}/{profile.passes} · {min(percent, 100)}%",
        }

    def phases(self) -> list[dict[str, Any]]:
        """Each state the run went through with its start and duration in seconds (the last is open if live)."""
        out = []
        entries = self.timeline
        for i, entry in enumerate(entries):
            start = entry["at"]
            end = entries[i + 1]["at"] if i + 1 < len(entries) else None
            duration = None
            if end is not None:
                duration = round(
                    (_parse_time(end) - _parse_time(start)).total_seconds(),
                    3,
                )
            out.append({"state": entry["state"], "at": start, "duration_s": duration})
        return out

    def requested_vs_effective(self) -> list[dict[str, Any]]:
        """Rows of (arg, what the config asked, what the server runs); `differs` when a request was not honoured.
        The args are the config's engine's launch fields the server reports, under its names, what the engine
        decides on its own (`launch_fields.DECIDED_BY_ENGINE`), then the config's expected server args."""
        engine = self.config.engine or launch_fields.SGLANG
        spec = self.config.launch_spec()
        requested: dict[str, Any] = {}
        for row in launch_fields.fields(engine):
            value = launch_fields.value_of(spec, row)
            if row.effective and launch_fields.is_set(value):
                requested[row.effective] = value
        requested.update((self.config.expect or {}).get("server_args", {}))
        shown = [row.effective for row in launch_fields.fields(engine) if row.effective]
        shown += launch_fields.DECIDED_BY_ENGINE[engine]
        rows = []
        for arg in dict.fromkeys([*shown, *requested]):
            if arg not in shown and arg not in self.effective_args:
                continue  # an expectation the server does not report
            want, have = requested.get(arg), self.effective_args.get(arg)
            rows.append(
                {"arg": arg, "requested": want, "effective": have, "differs": want is not None and want != have}
            )
        return rows

    def failure(self) -> dict[str, Any] | None:
        if not self.failure_kind:
            return None
        return {
            "kind": self.failure_kind,
            "message": self.failure_message,
            "excerpt": self.failure_excerpt,
            "first_line": self.failure_first_line,
        }

    def server_facts(self) -> dict[str, Any]:
        """What the server told about itself (loading per model, CUDA graphs, KV pool, retractions), for the page."""
        return server_facts(self.live_facts, self.loading_progress)

    def failure_evidence(self) -> Evidence:
        """What is known about this run's failure beyond its config: the failure itself, the server args (from the
        server, or the log's `server_args=` line when it failed before it answered), the host and the profile."""
        server_args = {k: v for k, v in self.effective_args.items() if k in SERVER_ARG_NAMES}
        if not server_args:
            # (through the related manager: log_chunks.py imports this module)
            line = self.logchunk_set.first_line_containing(self.pk, "server_args=", within=SERVER_ARGS_WITHIN)
            server_args = server_args_in(line) if line else {}
        profile = self.experiment.profile
        return Evidence(
            kind=self.failure_kind,
            message=self.failure_message,
            excerpt=self.failure_excerpt,
            server_args=server_args,
            server_facts=self.server_facts(),
            pids=tuple(self.remote_pids or ()),
            host_name=self.host.name,
            host_dirty_reason=self.host.dirty_reason if self.host.is_dirty else None,
            readiness_timeout_s=profile.readiness_timeout_s,
            stall_timeout_s=profile.stall_timeout_s,
            request_tokens=profile.input_len + profile.output_len,
        )

    def remedies(self) -> list[Remedy]:
        """What a person would try after this run's failure (nothing unless it failed)."""
        if self.state != self.State.FAILED or not self.failure_kind:
            return []
        return remedies_for(self.failure_evidence(), self.config.launch_spec())

    def remedy_rows(self) -> list[dict[str, Any]]:
        """The remedies as the run page and the API show them: a change in full (what it sets, and the config's env
        and extra args after it), and where advice is acted on."""
        links = {
            Link.HOST: reverse("host_detail", args=[self.host_id]),
            Link.COPY: f"{reverse('experiment_new')}?from={self.experiment_id}",
        }
        spec = self.config.launch_spec()
        return [remedy.as_json(spec, links) for remedy in self.remedies()]


# The server logs its args before it loads anything; a log without them in its first lines has none.
SERVER_ARGS_WITHIN = 2000


def _parse_time(value: str):
    from datetime import datetime

    return datetime.fromisoformat(value)
