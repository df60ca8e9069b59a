"""What a run ran on besides its config: the host's environment fingerprint read before the launch, the environment
its server processes received, the GPUs' telemetry while it loaded and benchmarked, and the server's own metrics
while it benchmarked."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from experiments.rules import secrets

from ..analysis.environment import checkout_detail, facts
from .runs import Run


class RunEnvironment(models.Model):
    """One per run that got as far as its preflight."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="environment")
    # workers.hostreads.fingerprint.parse(): kernel, gpus, gpu_summary, driver, cuda_driver, python, packages,
    # problems. Empty when the read failed (read_error says why).
    fingerprint = models.JSONField(default=dict, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)
    read_error = models.TextField(blank=True)
    # What the launch exported: the host's default env merged with the config's, and which came from the host.
    launch_env = models.JSONField(default=dict, blank=True)
    host_env_names = models.JSONField(default=list, blank=True)
    # [{"pid", "title", "env": {...} | null}] from /proc/<pid>/environ of every process of the server's group, the
    # launch policy's variables only (secrets masked); env null: the block was blank (unreadable, not empty).
    processes = models.JSONField(default=list, blank=True)
    processes_read_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"environment of run {self.run_id}"

    @property
    def server_env(self) -> dict[str, str] | None:
        """The environment the server received: its leader's, else the first readable process's; None if none was
        readable (or they were not read)."""
        readable = [p for p in self.processes if p.get("env") is not None]
        leader = [p for p in readable if p.get("pid") == self.run.remote_pid]
        chosen = (leader or readable or [None])[0]
        return dict(chosen["env"]) if chosen else None

    @property
    def unreadable_pids(self) -> list[int]:
        return [int(p["pid"]) for p in self.processes if p.get("env") is None]

    def process_differences(self) -> list[str]:
        """Variables the readable processes of the group did not all receive alike ("NCCL_PROTO: LL in pid 100;
        unset in pid 101"): a launcher that drops or rewrites them for its children."""
        readable = [p for p in self.processes if p.get("env") is not None]
        names = sorted({name for p in readable for name in p["env"]})
        found = []
        for name in names:
            values: dict[str, list[str]] = {}
            for p in readable:
                values.setdefault(p["env"].get(name, "unset"), []).append(str(p["pid"]))
            if len(values) > 1:
                found.append(f"{name}: " + "; ".join(f"{v} in pid {', '.join(pids)}" for v, pids in values.items()))
        return found

    def fact_rows(self) -> list[tuple[str, str]]:
        """(what, value) of the fingerprint for the run page; SGLang with its checkout's commit and local changes."""
        rows = [(name, value) for name, (_, value) in facts(self.fingerprint).items() if value]
        checkout = ((self.fingerprint.get("packages") or {}).get("sglang") or {}).get("checkout")
        if checkout:
            described = checkout_detail({}, self.fingerprint) or f"commit {str(checkout.get('commit'))[:7]}"
            rows.append(("SGLang checkout", f"{checkout.get('root', '')} at {described}".strip()))
        return rows

    def env_rows(self) -> list[dict[str, Any]]:
        """Every variable launched or received: its value at launch, as the server received it, and whence."""
        launched = secrets.shown(self.launch_env)
        received = self.server_env
        host_names = set(self.host_env_names)
        rows = []
        for name in sorted(set(launched) | set(received or {})):
            source = "host default" if name in host_names else ("config" if name in launched else "host login")
            rows.append(
                {
                    "name": name,
                    "launched": launched.get(name),
                    "received": None if received is None else received.get(name),
                    "source": source,
                    "differs": received is not None and launched.get(name, received.get(name)) != received.get(name),
                }
            )
        return rows

    def as_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "read_at": self.read_at.isoformat() if self.read_at else None,
            "read_error": self.read_error,
            "launch_env": secrets.shown(self.launch_env),
            "host_env_names": self.host_env_names,
            "server_env": self.server_env,
            "processes": self.processes,
            "unreadable_pids": self.unreadable_pids,
            "process_differences": self.process_differences(),
        }


class GpuSampleQuerySet(models.QuerySet["GpuSample"]):
    def of_run(self, run: Run | int) -> GpuSampleQuerySet:
        return self.filter(run=run).order_by("at", "gpu")


class GpuSample(models.Model):
    """One GPU's state at one instant of a run (nvidia-smi's telemetry query), stamped with the worker's clock, the
    clock the benchmark cells are stamped with, so both share one time axis."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE)
    at = models.DateTimeField(default=timezone.now)
    gpu = models.PositiveSmallIntegerField()
    sm_mhz = models.PositiveIntegerField(null=True)
    mem_mhz = models.PositiveIntegerField(null=True)
    temperature_c = models.SmallIntegerField(null=True)
    power_w = models.FloatField(null=True)
    utilization_pct = models.PositiveSmallIntegerField(null=True)
    memory_utilization_pct = models.PositiveSmallIntegerField(null=True)
    memory_used_mib = models.PositiveIntegerField(null=True)
    reasons = models.BigIntegerField(null=True, help_text="clocks_event_reasons.active, a bit mask.")

    objects = GpuSampleQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["run", "at"])]

    def __str__(self) -> str:
        return f"run {self.run_id} gpu {self.gpu} at {self.at:%H:%M:%S}"


class ServerMetricSampleQuerySet(models.QuerySet["ServerMetricSample"]):
    def of_run(self, run: Run | int) -> ServerMetricSampleQuerySet:
        return self.filter(run=run).order_by("at")

    def newest_id(self, run_id: int) -> int:
        """The id of the run's newest sample, 0 if it has none: samples are only ever added, so a page that has
        every sample up to this id has them all."""
        return self.filter(run_id=run_id).order_by("-id").values_list("id", flat=True).first() or 0


class ServerMetricSample(models.Model):
    """The server's Prometheus gauges at one instant of a benchmark cell (`analysis.telemetry.ServerMetricReading`),
    stamped with the worker's clock like GpuSample, so both are drawn on the cells' time axis.

    A model of its own rather than GpuSample generalised: a GPU sample is one GPU's integer readings and a clock-event
    mask, per GPU index, for the run's whole life; this is one per server, float gauges, during the cells only. One
    row type for both would be nullable columns of the other's in every row, or readings keyed by name in JSON,
    which neither the charts nor a query could rely on. None: not served, or not a finite non-negative number."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE)
    at = models.DateTimeField(default=timezone.now)
    num_running_reqs = models.FloatField(null=True)
    num_queue_reqs = models.FloatField(null=True)
    num_used_tokens = models.FloatField(null=True)
    token_usage = models.FloatField(null=True, help_text="KV cache tokens in use over its capacity, 0-1.")
    gen_throughput = models.FloatField(null=True, help_text="Output tok/s over the server's last decode-log window.")
    spec_accept_length = models.FloatField(null=True, help_text="Over the server's last decode-log window.")
    spec_accept_rate = models.FloatField(null=True, help_text="Accepted drafts over proposed, last window.")
    spec_num_steps = models.FloatField(null=True, help_text="The active speculative_num_steps.")
    spec_num_draft_tokens = models.FloatField(null=True)

    objects = ServerMetricSampleQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["run", "at"]),
            # A live page resumes after the newest sample it has (`?metrics_after=`), and its consumer compares that
            # with the newest stored every second: both read this index alone.
            models.Index(fields=["run", "id"], name="server_metric_samples_by_id"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} server metrics at {self.at:%H:%M:%S}"
