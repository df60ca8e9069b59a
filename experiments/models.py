"""The domain of specdash: hosts, configs, profiles, experiments, runs, measurements, logs."""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

# Flags that specdash itself sets from the config's fields; `extra_args` may not repeat them, or the
# stored config would lie about what ran.
MANAGED_FLAGS = frozenset(
    {
        "--model-path",
        "--model",
        "--host",
        "--port",
        "--tp-size",
        "--tp",
        "--tensor-parallel-size",
        "--speculative-algorithm",
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--served-model-name",
    }
)


class Host(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    address = models.CharField(max_length=255)
    port = models.PositiveIntegerField(default=22)
    username = models.CharField(max_length=64)
    key_name = models.CharField(
        max_length=128,
        blank=True,
        help_text="File name under SPECDASH_SSH_KEY_DIR; blank uses the SSH agent.",
    )
    host_key = models.TextField(blank=True, help_text="Pinned host public key (OpenSSH format).")
    gpu_inventory = models.JSONField(default=list, blank=True)
    work_dir = models.CharField(max_length=512, default="specdash-work", help_text="Relative to the login's home.")
    models_root = models.CharField(max_length=512, blank=True, help_text="Directory whose subdirectories are models.")
    shell_setup = models.TextField(blank=True, help_text="Shell lines run before every command, e.g. activate a venv.")
    launcher = models.CharField(max_length=255, default="python3 -m sglang.launch_server")
    python = models.CharField(max_length=255, default="python3", help_text="Runs the shipped benchmark client.")
    server_port = models.PositiveIntegerField(default=30000)
    is_dirty = models.BooleanField(default=False)
    dirty_reason = models.TextField(blank=True)
    # The host lock: set with a conditional UPDATE by the worker that claims a run, cleared after teardown.
    active_run = models.OneToOneField(
        "Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_pinned(self) -> bool:
        return bool(self.host_key.strip())

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_inventory)


class ServerConfig(models.Model):
    class Algorithm(models.TextChoices):
        NONE = "", "none (baseline)"
        EAGLE = "EAGLE", "EAGLE"
        EAGLE3 = "EAGLE3", "EAGLE3"
        NEXTN = "NEXTN", "NEXTN"
        STANDALONE = "STANDALONE", "STANDALONE"
        NGRAM = "NGRAM", "NGRAM"

    name = models.CharField(max_length=128)
    model_path = models.CharField(max_length=512)
    served_model_name = models.CharField(max_length=255, blank=True)
    speculative_algorithm = models.CharField(max_length=16, choices=Algorithm.choices, blank=True, default="")
    speculative_draft_model_path = models.CharField(max_length=512, blank=True)
    speculative_num_steps = models.PositiveIntegerField(null=True, blank=True)
    speculative_eagle_topk = models.PositiveIntegerField(null=True, blank=True)
    speculative_num_draft_tokens = models.PositiveIntegerField(null=True, blank=True)
    tp_size = models.PositiveIntegerField(default=1)
    extra_args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    expect = models.JSONField(default=dict, blank=True)
    log_metrics = models.JSONField(default=dict, blank=True)
    content_hash = models.CharField(max_length=64, db_index=True, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    # The fields that decide what runs on the host; the name is a label and does not change the hash.
    LAUNCH_FIELDS = (
        "model_path",
        "served_model_name",
        "speculative_algorithm",
        "speculative_draft_model_path",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "tp_size",
        "extra_args",
        "env",
        "expect",
        "log_metrics",
    )

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        new_hash = self.compute_hash()
        if self.pk and new_hash != self.content_hash and self.is_frozen:
            raise ValueError(f"Config {self.name!r} was used by a finished run and cannot change; copy it instead.")
        self.content_hash = new_hash
        super().save(*args, **kwargs)

    @property
    def is_speculative(self) -> bool:
        return bool(self.speculative_algorithm)

    def launch_spec(self) -> dict[str, Any]:
        return {field: getattr(self, field) for field in self.LAUNCH_FIELDS}

    def compute_hash(self) -> str:
        canonical = json.dumps(self.launch_spec(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def short_hash(self) -> str:
        return self.content_hash[:10]

    @property
    def is_frozen(self) -> bool:
        """A config that a finished run used is history: editing it would rewrite what was measured."""
        return self.pk is not None and self.run_set.filter(state__in=Run.TERMINAL_STATES).exists()


class BenchmarkProfile(models.Model):
    name = models.CharField(max_length=128)
    dataset = models.CharField(max_length=32, default="random")
    input_len = models.PositiveIntegerField(default=128)
    output_len = models.PositiveIntegerField(default=128)
    num_prompts = models.PositiveIntegerField(default=16)
    concurrency = models.JSONField(default=list)
    warmup_requests = models.PositiveIntegerField(default=1)
    passes = models.PositiveIntegerField(default=1)
    launches = models.PositiveIntegerField(default=1)
    seed = models.IntegerField(default=1)
    request_timeout_s = models.PositiveIntegerField(default=600)
    readiness_timeout_s = models.PositiveIntegerField(default=1800)
    stall_timeout_s = models.PositiveIntegerField(
        default=300, help_text="No log progress and no port answer for this long while loading = zombie."
    )
    series_key = models.CharField(max_length=16, db_index=True, editable=False, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.series_key = self.compute_series_key()
        super().save(*args, **kwargs)

    @property
    def cells_per_run(self) -> int:
        return self.passes * len(self.concurrency)

    # What a request looks like: results of profiles that agree on these are comparable across experiments.
    SERIES_FIELDS = ("dataset", "input_len", "output_len", "num_prompts", "seed", "warmup_requests")

    def compute_series_key(self) -> str:
        canonical = json.dumps({f: getattr(self, f) for f in self.SERIES_FIELDS}, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def series_label(self) -> str:
        return f"{self.input_len} in / {self.output_len} out, {self.num_prompts} prompts, seed {self.seed}"


class Experiment(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        FINISHED = "finished"
        FAILED = "failed"

    name = models.CharField(max_length=200)
    host = models.ForeignKey(Host, on_delete=models.PROTECT)
    baseline = models.ForeignKey(ServerConfig, on_delete=models.PROTECT, related_name="+")
    candidates = models.ManyToManyField(ServerConfig, through="Candidate", related_name="+")
    profile = models.ForeignKey(BenchmarkProfile, on_delete=models.PROTECT)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("experiment_detail", args=[self.pk])

    def ordered_candidates(self) -> list[ServerConfig]:
        return [c.config for c in self.candidate_set.select_related("config").order_by("position")]

    def status_of(self, runs: list[Run]) -> str:
        """The experiment's status from its runs (given, so a page that already has them saves a query)."""
        if not runs or all(r.state == Run.State.QUEUED for r in runs):
            return self.Status.QUEUED
        if any(not r.is_finished for r in runs):
            return self.Status.RUNNING
        if any(r.state == Run.State.FAILED for r in runs):
            return self.Status.FAILED
        return self.Status.FINISHED

    @property
    def status(self) -> str:
        return self.status_of(list(self.run_set.all()))


class Candidate(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE)
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT)
    position = models.PositiveIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["experiment", "position"], name="candidate_position_unique")]

    def __str__(self) -> str:
        return f"{self.experiment_id}#{self.position}: {self.config_id}"


class RunQuerySet(models.QuerySet["Run"]):
    def active(self) -> RunQuerySet:
        return self.exclude(state__in=Run.TERMINAL_STATES).exclude(state=Run.State.QUEUED)

    def queued(self) -> RunQuerySet:
        return self.filter(state=Run.State.QUEUED)

    def on_host(self, host: Host | int) -> RunQuerySet:
        return self.filter(host=host)

    def stale(self, stale_after: timedelta) -> RunQuerySet:
        """Live runs whose worker has not beaten for `stale_after`: candidates for re-attachment."""
        return self.active().filter(heartbeat_at__lt=timezone.now() - stale_after)


class Run(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued"
        CONNECTING = "connecting"
        PREFLIGHT = "preflight"
        LAUNCHING = "launching"
        LOADING = "loading"
        WARMING = "warming"
        READY = "ready"
        VERIFYING = "verifying"
        BENCHMARKING = "benchmarking"
        TEARDOWN = "teardown"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class FailureKind(models.TextChoices):
        SSH = "ssh"
        PREFLIGHT = "preflight"
        CRASHED = "crashed"
        OOM = "oom"
        CONTEXT_LENGTH = "context_length"
        ZOMBIE = "zombie"
        READINESS_TIMEOUT = "readiness_timeout"
        MISCONFIGURED = "misconfigured"
        ENV_NOT_PROPAGATED = "env_not_propagated"
        SMOKE_FAILED = "smoke_failed"
        BENCHMARK_FAILED = "benchmark_failed"
        TEARDOWN_INCOMPLETE = "teardown_incomplete"
        INTERNAL = "internal"

    TERMINAL_STATES = (State.SUCCEEDED, State.FAILED, State.CANCELLED)
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
    loading_progress = models.PositiveSmallIntegerField(null=True, blank=True)
    effective_args = models.JSONField(default=dict, blank=True)
    # The latest structured facts read from the log (Decode-batch figures, custom metrics), so a page reload
    # shows what the live stream showed.
    live_facts = models.JSONField(default=dict, blank=True)
    launch_command = models.TextField(blank=True)
    benchmark_cell = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["experiment_id", "sequence"]
        constraints = [models.UniqueConstraint(fields=["experiment", "sequence"], name="run_sequence_unique")]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.config.name})"

    def get_absolute_url(self) -> str:
        return reverse("run_detail", args=[self.pk])

    @property
    def is_finished(self) -> bool:
        return self.state in self.TERMINAL_STATES

    @property
    def can_cancel(self) -> bool:
        return not self.is_finished and not self.cancel_requested

    @property
    def is_live(self) -> bool:
        return not self.is_finished and self.state != self.State.QUEUED

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

    # Server args worth seeing beside the request: what the config sets, and what SGLang decides on its own.
    SHOWN_SERVER_ARGS = (
        "model_path",
        "tp_size",
        "speculative_algorithm",
        "speculative_draft_model_path",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "disable_overlap_schedule",
        "max_running_requests",
        "mem_fraction_static",
        "context_length",
        "cuda_graph_max_bs",
    )

    def requested_vs_effective(self) -> list[dict[str, Any]]:
        """Rows of (arg, what the config asked, what the server runs); `differs` when a request was not honoured."""
        requested = {k: v for k, v in self.config.launch_spec().items() if v not in (None, "", [], {})}
        requested.update((self.config.expect or {}).get("server_args", {}))
        rows = []
        for arg in dict.fromkeys([*self.SHOWN_SERVER_ARGS, *requested]):
            if arg not in self.SHOWN_SERVER_ARGS and arg not in self.effective_args:
                continue  # env, extra_args, expectations: not server args
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


def _parse_time(value: str):
    from datetime import datetime

    return datetime.fromisoformat(value)


class Measurement(models.Model):
    """One benchmark cell: a (run, pass, concurrency) result of the benchmark client."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE)
    pass_index = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField()
    completed = models.PositiveIntegerField()
    failed = models.PositiveIntegerField(default=0)
    duration_s = models.FloatField()
    output_throughput = models.FloatField()
    total_throughput = models.FloatField()
    request_throughput = models.FloatField()
    input_throughput = models.FloatField(default=0)
    accept_length = models.FloatField(null=True, blank=True, help_text="From the requests' meta_info.")
    server_accept_length = models.FloatField(
        null=True, blank=True, help_text="avg_spec_accept_length of /get_server_info, reset by /flush_cache before."
    )
    # The server's own Decode-batch lines logged during the cell: {lines, first_line, last_line, mean_gen_throughput,
    # mean_accept_len, max_running_req}.
    server_decode = models.JSONField(default=dict, blank=True)
    mean_ttft_ms = models.FloatField(null=True)
    median_ttft_ms = models.FloatField(null=True)
    p90_ttft_ms = models.FloatField(null=True)
    p99_ttft_ms = models.FloatField(null=True)
    mean_tpot_ms = models.FloatField(null=True)
    median_tpot_ms = models.FloatField(null=True)
    p90_tpot_ms = models.FloatField(null=True)
    p99_tpot_ms = models.FloatField(null=True)
    mean_itl_ms = models.FloatField(null=True)
    median_itl_ms = models.FloatField(null=True)
    p90_itl_ms = models.FloatField(null=True)
    p99_itl_ms = models.FloatField(null=True)
    mean_e2e_latency_ms = models.FloatField(null=True)
    median_e2e_latency_ms = models.FloatField(null=True)
    p90_e2e_latency_ms = models.FloatField(null=True)
    p99_e2e_latency_ms = models.FloatField(null=True)
    raw = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    LATENCY_FIELDS = tuple(
        f"{stat}_{metric}"
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms")
        for stat in ("mean", "median", "p90", "p99")
    )

    class Meta:
        ordering = ["run_id", "pass_index", "concurrency"]
        constraints = [
            models.UniqueConstraint(fields=["run", "pass_index", "concurrency"], name="measurement_cell_unique")
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} pass {self.pass_index} c={self.concurrency}: {self.output_throughput:.1f} tok/s"


class LogChunkQuerySet(models.QuerySet["LogChunk"]):
    def lines(self, run_id: int, *, after: int, limit: int, containing: str | None = None) -> list[dict[str, Any]]:
        """Numbered lines after line `after` (1-based), at most `limit`; with `containing`, only lines that
        contain it, case-insensitively (the database narrows to the chunks that have a match)."""
        chunks = self.filter(run_id=run_id).annotate(last=F("first_line") + F("line_count") - 1).filter(last__gt=after)
        if containing:
            chunks = chunks.filter(text__icontains=containing)
            wanted = containing.casefold()
        else:
            chunks = chunks.filter(first_line__lte=after + limit)
        out: list[dict[str, Any]] = []
        for first_line, text in chunks.order_by("first_line").values_list("first_line", "text").iterator():
            for i, line in enumerate(text.split("\n")):
                n = first_line + i
                if n <= after or (containing and wanted not in line.casefold()):
                    continue
                out.append({"n": n, "text": line})
                if len(out) >= limit:
                    return out
        return out


class LogChunk(models.Model):
    """A batch of consecutive server log lines; line numbers are 1-based and contiguous per run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE)
    first_line = models.PositiveIntegerField()
    line_count = models.PositiveIntegerField()
    # PostgreSQL compresses (TOAST) values this large by itself; a 10,000-line chunk shrinks several times.
    text = models.TextField()

    objects = LogChunkQuerySet.as_manager()

    class Meta:
        ordering = ["run_id", "first_line"]
        constraints = [models.UniqueConstraint(fields=["run", "first_line"], name="logchunk_first_line_unique")]

    def __str__(self) -> str:
        return f"run {self.run_id} lines {self.first_line}-{self.last_line}"

    @property
    def last_line(self) -> int:
        return self.first_line + self.line_count - 1

    def lines(self) -> list[str]:
        return self.text.split("\n")


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def matching(self, raw_token: str) -> ApiTokenQuerySet:
        return self.filter(digest=ApiToken.digest_of(raw_token))


class ApiToken(models.Model):
    """A bearer token for the JSON API; only its digest is stored, the token is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    name = models.CharField(max_length=100, default="api")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.name} ({self.user_id})"

    @staticmethod
    def digest_of(raw_token: str) -> str:
        return hashlib.sha256(raw_token.encode()).hexdigest()

    @classmethod
    def issue(cls, user, name: str = "api") -> tuple[ApiToken, str]:
        raw = "sd_" + secrets.token_urlsafe(32)
        return cls.objects.create(user=user, name=name, digest=cls.digest_of(raw)), raw

    def touch(self) -> None:
        # At most one write a minute per token: the API is polled by scripts.
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at > timedelta(minutes=1):
            self.last_used_at = now
            self.save(update_fields=["last_used_at"])


class Flag(models.Model):
    """A regression or anomaly found in a (host, config, profile, concurrency) series; the team triages it."""

    class Triage(models.TextChoices):
        UNTRIAGED = "untriaged"
        ACKNOWLEDGED = "acknowledged"
        INVALID = "invalid"
        FIXED = "fixed"

    OPEN_STATES = (Triage.UNTRIAGED, Triage.ACKNOWLEDGED)

    host = models.ForeignKey(Host, on_delete=models.CASCADE)
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT)
    config_hash = models.CharField(max_length=64, db_index=True)
    profile_key = models.CharField(max_length=16)
    profile_label = models.CharField(max_length=200)
    concurrency = models.PositiveIntegerField()
    run = models.ForeignKey(Run, on_delete=models.CASCADE, help_text="The first run at the new level.")
    kind = models.CharField(max_length=16)  # "lookback" | "change_point"
    direction = models.CharField(max_length=16)  # "regression" | "improvement"
    baseline_mean = models.FloatField()
    new_mean = models.FloatField()
    change = models.FloatField(help_text="Relative: -0.074 is 7.4% slower.")
    score = models.FloatField()
    message = models.TextField()
    triage = models.CharField(max_length=16, choices=Triage.choices, default=Triage.UNTRIAGED, db_index=True)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.direction} {self.change:+.1%} {self.config.name} c={self.concurrency} on {self.host.name}"

    def get_absolute_url(self) -> str:
        return reverse("flag_detail", args=[self.pk])

    @property
    def is_open(self) -> bool:
        return self.triage in self.OPEN_STATES


class FlagComment(models.Model):
    flag = models.ForeignKey(Flag, on_delete=models.CASCADE)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    text = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"comment {self.pk} on flag {self.flag_id}"


class PinnedBaseline(models.Model):
    """The baseline config a team compares against on a host for a kind of request; its history is watched."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE)
    profile_key = models.CharField(max_length=16)
    profile_label = models.CharField(max_length=200)
    config = models.ForeignKey(ServerConfig, on_delete=models.PROTECT)
    pinned_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    pinned_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["host", "profile_key"], name="one_pinned_baseline")]

    def __str__(self) -> str:
        return f"{self.config.name} pinned on {self.host.name} ({self.profile_label})"
