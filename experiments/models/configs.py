"""What is launched (a server config) and how it is measured (a benchmark profile)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from experiments.analysis import slo
from experiments.analysis.launch_estimates import Cell, LaunchKind
from experiments.formats.prompt_sampling import SampledPrompt
from experiments.rules import headroom, launch_fields, model_checks, secrets

from .prompt_store import load_sample
from .run_states import TERMINAL_STATES
from .secret_env import SecretEnvField


class ServerConfigQuerySet(models.QuerySet["ServerConfig"]):
    def with_hash(self, content_hash: str) -> ServerConfigQuerySet:
        """The configs with this content hash (the same launch under any name), newest first."""
        return self.filter(content_hash=content_hash).order_by("-created_at")


class ServerConfig(models.Model):
    name = models.CharField(max_length=128)
    # The inference engine that serves it (launch_fields.ENGINE_NAMES); its launch fields are that engine's rows.
    engine = models.CharField(
        max_length=16,
        default=launch_fields.SGLANG,
        choices=[(e, launch_fields.label(e)) for e in launch_fields.ENGINE_NAMES],
    )
    model_path = models.CharField(max_length=512)
    served_model_name = models.CharField(max_length=255, blank=True)
    # In the engine's own spelling; which values an engine takes is its launch_fields row's (SGLang's EAGLE3, vLLM's
    # eagle3): "" is a baseline in every engine.
    speculative_algorithm = models.CharField(max_length=16, blank=True, default="")
    speculative_draft_model_path = models.CharField(max_length=512, blank=True)
    speculative_num_steps = models.PositiveIntegerField(null=True, blank=True)
    speculative_eagle_topk = models.PositiveIntegerField(null=True, blank=True)
    speculative_num_draft_tokens = models.PositiveIntegerField(null=True, blank=True)
    tp_size = models.PositiveIntegerField(default=1)
    extra_args = models.JSONField(default=list, blank=True)
    env = SecretEnvField(default=dict, blank=True)
    # The engine's settings that have no column (launch_fields rows with column=False), by row name.
    engine_options = models.JSONField(default=dict, blank=True)
    expect = models.JSONField(default=dict, blank=True)
    log_metrics = models.JSONField(default=dict, blank=True)
    content_hash = models.CharField(max_length=64, db_index=True, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    # A new version made by a remedy (actions.runs.do_rerun_with_remedy): the config it changes and the failed run it
    # answers, so that the failure and the version link to each other. Not launch fields: the hash ignores them.
    derived_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="versions", editable=False
    )
    remedy_for_run = models.ForeignKey(
        "Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="remedy_configs", editable=False
    )

    # An adaptive server (`--speculative-adaptive`): the steps move with the batch size as this schedule says. A
    # launch field, but outside LAUNCH_FIELDS: the hash takes its digest only when it is set, so the hash of every
    # config without one stays what it was.
    adaptive_schedule = models.ForeignKey(
        "AdaptiveSchedule", null=True, blank=True, on_delete=models.PROTECT, related_name="server_configs"
    )

    objects = ServerConfigQuerySet.as_manager()

    # The fields that decide what runs on the host, every engine's columns (the name is a label and does not change
    # the hash). The engine and its options are launch fields too, outside this list: the hash takes them only when
    # they differ from SGLang with no options, so the hash of every config made before engines existed stays what it
    # was.
    LAUNCH_FIELDS = (*launch_fields.column_names(), *launch_fields.FREE_FIELDS)

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

    @property
    def simulated_accept_length(self) -> float | None:
        """The accept length SGLANG_SIMULATE_ACC_LEN sets (a headroom study's copies), or None: such a config
        measures what a draft of that acceptance would be worth in speed, never its outputs' quality."""
        return headroom.simulated_length(self.env)

    @property
    def gpu_count(self) -> int:
        """The GPUs one server of this config occupies: tp x pp x dp (the last two from its extra args)."""
        pp = model_checks.int_arg(self.extra_args or [], "--pp-size") or 1
        dp = model_checks.int_arg(self.extra_args or [], "--dp-size") or 1
        return max(1, self.tp_size or 1) * pp * dp

    @property
    def engine_label(self) -> str:
        return launch_fields.label(self.engine)

    def launch_spec(self) -> dict[str, Any]:
        return {
            **{field: getattr(self, field) for field in self.LAUNCH_FIELDS},
            "engine": self.engine,
            "engine_options": dict(self.engine_options or {}),
        }

    def compute_hash(self) -> str:
        # The secrets' values, not their masks: two configs that differ only in a token are two launches.
        spec = {**self.launch_spec(), "env": secrets.revealed(self.env)}
        if spec["engine"] == launch_fields.SGLANG:
            del spec["engine"]
        if not spec["engine_options"]:
            del spec["engine_options"]
        if self.adaptive_schedule_id is not None:
            spec["adaptive_schedule"] = self.adaptive_schedule.digest  # type: ignore[union-attr]
        canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def short_hash(self) -> str:
        return self.content_hash[:10]

    @property
    def is_frozen(self) -> bool:
        """A config that a finished run used is history: editing it would rewrite what was measured."""
        return self.pk is not None and self.run_set.filter(state__in=TERMINAL_STATES).exists()


class BenchmarkProfileQuerySet(models.QuerySet["BenchmarkProfile"]):
    def in_series(self, series_key: str) -> BenchmarkProfileQuerySet:
        """The profiles whose results are comparable under `series_key`, newest first."""
        return self.filter(series_key=series_key).order_by("-created_at")


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
    # What is sent: a prompt set (None: random token ids, as before sets existed), sampled `num_prompts` at a time
    # with `seed`; `input_len` and `output_len` cap a set's prompts and completions. Sampling as bench_serving.
    prompt_set = models.ForeignKey(
        "PromptSet",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        help_text="sampled with the seed; the input and output lengths cap each prompt and completion",
    )
    temperature = models.FloatField(default=0.0, help_text="0: greedy; outputs are then checked against the baseline")
    top_p = models.FloatField(default=1.0)
    # The equivalence gate (analysis/equivalence.py), at temperature 0: a candidate whose outputs part from the
    # baseline's before this token in more than this share of prompts is marked "outputs differ".
    gate_within_tokens = models.PositiveIntegerField(
        default=32, help_text="equivalence gate: divergence before this token"
    )
    gate_max_share = models.FloatField(default=0.01, help_text="equivalence gate: share of prompts allowed to diverge")
    request_timeout_s = models.PositiveIntegerField(default=600)
    readiness_timeout_s = models.PositiveIntegerField(default=1800)
    stall_timeout_s = models.PositiveIntegerField(
        default=300, help_text="No log progress and no port answer for this long while loading = zombie."
    )
    # A latency objective the results are judged under (analysis/slo.py): `slo_percentile` of `slo_metric` at most
    # `slo_limit_ms`; blank: none. A judgement, not a condition of the measurement, so not in the series key.
    slo_metric = models.CharField(
        max_length=16, blank=True, choices=[(m, m.replace("_", " ").upper()) for m in slo.METRICS], help_text="SLO"
    )
    slo_percentile = models.CharField(max_length=8, blank=True, choices=[(p, p) for p in slo.PERCENTILES])
    slo_limit_ms = models.FloatField(null=True, blank=True, help_text="SLO: at most this many ms")
    series_key = models.CharField(max_length=16, db_index=True, editable=False, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    objects = BenchmarkProfileQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.prompt_set is not None:
            self.dataset = self.prompt_set.kind
        self.series_key = self.compute_series_key()
        super().save(*args, **kwargs)

    @property
    def is_greedy(self) -> bool:
        """Temperature 0: every server must produce the same outputs for the same prompts (the equivalence gate)."""
        return self.temperature == 0

    @property
    def outputs_unjudged(self) -> str:
        """Why a candidate measured with this profile may have no equivalence gate, and what would give it one."""
        if not self.is_greedy:
            return (
                f"not compared: the profile samples (temperature {self.temperature:g}), so outputs differ by design; "
                "a profile at temperature 0 compares them"
            )
        return "no outputs compared yet: it and the baseline each need a succeeded run of this profile"

    def prompt_sample(self) -> tuple[bytes, list[SampledPrompt]] | None:
        """The sampled prompts as the client's file and as values; None for random ids (drawn by the client)."""
        prompt_set = self.prompt_set
        if prompt_set is None or prompt_set.is_random:
            return None
        return load_sample(
            prompt_set.load_conversations,
            prompt_set.content_hash,
            self.num_prompts,
            self.seed,
            self.input_len,
            self.output_len,
        )

    @property
    def cells_per_run(self) -> int:
        return self.passes * len(self.concurrency)

    def benchmark_cells(self) -> list[tuple[int, int]]:
        """(pass index, concurrency) of each benchmark cell of a run, in the order a run measures them: every
        concurrency once per pass, so a pass's cells are measured close together in time."""
        return [(pass_index, concurrency) for pass_index in range(self.passes) for concurrency in self.concurrency]

    def launch_kind(self, *, config: str, model: str, profiled: bool = False) -> LaunchKind:
        """One launch with this profile, as its estimate sees it: of the config of content hash `config` ("" for
        none yet) serving `model`; `profiled`: profiling after its cells."""
        return LaunchKind(
            config=config,
            model=model,
            cells=tuple(Cell(c, self.num_prompts, self.output_len) for _, c in self.benchmark_cells()),
            profiled=profiled,
            readiness_timeout_s=self.readiness_timeout_s,
            request_timeout_s=self.request_timeout_s,
        )

    # What a request looks like: results of profiles that agree on these are comparable across experiments.
    SERIES_FIELDS = ("dataset", "input_len", "output_len", "num_prompts", "seed", "warmup_requests")

    @property
    def slo(self) -> slo.Slo | None:
        """The profile's latency objective, or None when it sets none (the form sets all three or none)."""
        if not self.slo_metric or not self.slo_percentile or self.slo_limit_ms is None:
            return None
        return slo.Slo(self.slo_metric, self.slo_percentile, self.slo_limit_ms)

    def compute_series_key(self) -> str:
        shape: dict[str, Any] = {f: getattr(self, f) for f in self.SERIES_FIELDS}
        # Only what differs from random ids at temperature 0 joins the key, so the series of profiles stored before
        # prompt sets keep their keys.
        if self.prompt_set is not None and not self.prompt_set.is_random:
            shape["prompt_set"] = self.prompt_set.content_hash
        if self.temperature != 0 or self.top_p != 1:
            shape["sampling"] = [self.temperature, self.top_p]
        canonical = json.dumps(shape, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def summary(self) -> str:
        """The whole profile on one line, every number beside what it counts (concurrency levels, prompts, tokens in
        and out, seed, passes and launches): a bare "[1, 4] · 8" reads as 8 requests in flight."""
        passes = f"{self.passes} pass{'' if self.passes == 1 else 'es'}"
        launches = f"{self.launches} launch{'' if self.launches == 1 else 'es'}"
        return (
            f"concurrency [{', '.join(str(c) for c in self.concurrency)}] · {self.num_prompts} prompts · "
            f"{self.input_len} in / {self.output_len} out · seed {self.seed} · {passes} × {launches}"
        )

    @property
    def series_label(self) -> str:
        if self.prompt_set is not None and not self.prompt_set.is_random:
            return (
                f"{self.prompt_set} ≤{self.input_len} in / ≤{self.output_len} out, {self.num_prompts} prompts, "
                f"seed {self.seed}"
            )
        return f"{self.input_len} in / {self.output_len} out, {self.num_prompts} prompts, seed {self.seed}"
