"""A measurement: one benchmark cell of a run (pass, concurrency), as the benchmark client and the server saw it."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from .runs import Run


class MeasurementQuerySet(models.QuerySet):
    def of_succeeded_runs(self) -> MeasurementQuerySet:
        """The cells the statistics may read: of runs that succeeded, with some output. What is left is judged
        sample by sample by `analysis.is_usable` (PostgreSQL's NaN and Infinity pass `> 0`)."""
        return self.filter(run__state=Run.State.SUCCEEDED, output_throughput__gt=0)


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
    # Acceptance three ways: token-weighted over the requests, pooled from the server's counters, the mean of the
    # requests' own (analysis/acceptance.py defines each and when they must agree).
    accept_length = models.FloatField(null=True, blank=True, help_text="Token-weighted over the requests.")
    pooled_accept_length = models.FloatField(null=True, blank=True, help_text="From the Prometheus counters.")
    mean_request_accept_length = models.FloatField(null=True, blank=True, help_text="The mean of the requests'.")
    server_accept_length = models.FloatField(
        null=True, blank=True, help_text="avg_spec_accept_length of /get_server_info, reset by /flush_cache before."
    )
    server_mean_e2e_latency_ms = models.FloatField(
        null=True,
        blank=True,
        help_text="The server's own mean end-to-end latency over the cell's requests (its Prometheus histogram).",
    )
    # Over the longest stretch of the cell with at least 80% of its concurrency in flight, ramp-up and tail left out
    # (analysis/steady_state.py); null where no stretch qualified.
    steady_state_output_throughput = models.FloatField(
        null=True, blank=True, help_text="Output tok/s over the steady-state window."
    )
    steady_state_window_s = models.FloatField(null=True, blank=True, help_text="The steady-state window's length (s).")
    steady_state_accept_length = models.FloatField(
        null=True, blank=True, help_text="Output tokens per verify step over the steady-state window."
    )
    # Acceptance per draft position, from the requests' accepted-drafts histograms (analysis/acceptance.py): the
    # summed histogram (index i: verify steps that accepted exactly i drafts), the share of verify steps that
    # accepted draft 1, 2, ..., and both per prompt category. Null where the server reported no histogram.
    accepted_drafts_histogram = models.JSONField(
        null=True, blank=True, help_text="Index i: the cell's verify steps that accepted exactly i drafts."
    )
    position_acceptance = models.JSONField(
        null=True, blank=True, help_text="Position j (from 1): the share of verify steps that accepted >= j drafts."
    )
    position_acceptance_by_category = models.JSONField(
        null=True,
        blank=True,
        help_text="Per prompt category: {accepted_drafts_histogram, position_acceptance}.",
    )
    # The server's own Decode-batch lines logged during the cell: {lines, idle_lines, first_line, last_line,
    # mean_gen_throughput, mean_accept_len, max_running_req}; the means leave out the idle lines.
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
    # Each measured request's own latencies (the benchmark client's request rows, checked by analysis/slo.py:
    # {ok, output_len, ttft_ms, tpot_ms, itl_ms, e2e_latency_ms}), what goodput under an SLO counts; empty where the
    # client did not report them (runs measured before, imports).
    requests = models.JSONField(default=list, blank=True)
    # The worker's clock (the GPU samples' clock) when the client returned: the cell ran for `duration_s` before it.
    ended_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    LATENCY_FIELDS = tuple(
        f"{stat}_{metric}"
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms")
        for stat in ("mean", "median", "p90", "p99")
    )

    objects = MeasurementQuerySet.as_manager()

    class Meta:
        ordering = ["run_id", "pass_index", "concurrency"]
        constraints = [
            models.UniqueConstraint(fields=["run", "pass_index", "concurrency"], name="measurement_cell_unique")
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} pass {self.pass_index} c={self.concurrency}: {self.output_throughput:.1f} tok/s"
