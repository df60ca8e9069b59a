"""What a run's GPU telemetry says about its measurement: whether the GPUs were throttled while it benchmarked, and
at which clocks they ran; and, across the runs of a comparison, which run ran differently from the others. And the
server's own metrics sampled during its benchmark cells, read from the client's report onto the same clock. Pure.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# nvidia-smi -q -d PERFORMANCE names, by bit of the clocks_event_reasons.active mask (NVML's
# nvmlClocksEventReason*): the one table, read by the worker's parser, the pages and bench/gpu_host_check.py.
CLOCK_EVENT_REASONS = (
    (0x1, "idle"),
    (0x2, "applications clocks setting"),
    (0x4, "SW power cap"),
    (0x8, "HW slowdown"),
    (0x10, "sync boost"),
    (0x20, "SW thermal slowdown"),
    (0x40, "HW thermal slowdown"),
    (0x80, "HW power brake slowdown"),
    (0x100, "display clock setting"),
)
# The reasons that mean a GPU ran slower than it could for want of power or cooling.
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
THROTTLE_REASONS = tuple((bit, name) for bit, name in CLOCK_EVENT_REASONS if bit & THROTTLE_MASK)
# Clocks that differ by more than this from the other runs' make a comparison of unlike machines.
CLOCK_TOLERANCE = 0.05


@dataclass(frozen=True)
class GpuReading:
    """One GPU's state at one instant: the one shape of an nvidia-smi telemetry reading, parsed by the worker, stored
    as a `GpuSample` row (by field name, `stored_fields`) and read back for the pages. None where the driver reports
    "[N/A]"; `t` is seconds since the epoch on the worker's clock, the clock the benchmark cells are stamped with."""

    gpu: int
    sm_mhz: int | None
    mem_mhz: int | None
    temperature_c: int | None
    power_w: float | None
    utilization_pct: int | None
    memory_utilization_pct: int | None
    memory_used_mib: int | None
    reasons: int | None
    t: float = 0.0  # 0 until the worker stamps it

    @property
    def throttled(self) -> bool:
        return self.reasons is not None and is_throttled(self.reasons)

    def stored_fields(self) -> dict[str, Any]:
        """The fields a GpuSample row keeps (its `at` holds `t`)."""
        return {name: getattr(self, name) for name in READING_FIELDS}


READING_FIELDS = tuple(f.name for f in dataclasses.fields(GpuReading) if f.name != "t")


def clock_event_reasons(mask: int) -> list[str]:
    """The names of the reasons set in `mask` (0x1 -> ["idle"])."""
    return [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]


def is_throttled(mask: int) -> bool:
    return bool(mask & THROTTLE_MASK)


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS if mask & bit]


def in_windows(samples: Sequence[GpuReading], windows: Sequence[tuple[float, float]]) -> list[GpuReading]:
    """The samples taken while a benchmark cell ran (`windows`: their start and end)."""
    return [s for s in samples if any(start <= s.t <= end for start, end in windows)]


def summary(samples: Sequence[GpuReading], windows: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """The run's telemetry while it benchmarked (all of it when no cell was recorded): how many samples, how many
    throttled and why, the median SM and memory clocks, the hottest and the mean power."""
    # The run's GPUs are those that held memory; an idle neighbour at idle clocks says nothing about the run.
    used = {s.gpu for s in samples if s.memory_used_mib}
    samples = [s for s in samples if s.gpu in used] if used else list(samples)
    chosen = in_windows(samples, windows) if windows else samples
    if not chosen:
        return {"samples": 0, "throttled": False}
    throttled = [s for s in chosen if s.reasons is not None and s.reasons & THROTTLE_MASK]
    mask = 0
    for s in throttled:
        mask |= s.reasons or 0
    sm = [s.sm_mhz for s in chosen if s.sm_mhz is not None]
    mem = [s.mem_mhz for s in chosen if s.mem_mhz is not None]
    temps = [s.temperature_c for s in chosen if s.temperature_c is not None]
    power = [s.power_w for s in chosen if s.power_w is not None]
    return {
        "samples": len(chosen),
        "while_benchmarking": bool(windows),
        "throttled": bool(throttled),
        "throttled_samples": len(throttled),
        "throttle_reasons": throttle_names(mask),
        "median_sm_mhz": statistics.median(sm) if sm else None,
        "min_sm_mhz": min(sm) if sm else None,
        "median_mem_mhz": statistics.median(mem) if mem else None,
        "max_temperature_c": max(temps) if temps else None,
        "mean_power_w": round(statistics.fmean(power), 1) if power else None,
    }


def describe(label: str, run_summary: Mapping[str, Any]) -> str | None:
    """ "run 12 (eagle3) was throttled while benchmarking: HW thermal slowdown in 14 of 40 samples, SM clock down to
    1320 MHz" or None."""
    if not run_summary.get("throttled"):
        return None
    when = "while benchmarking" if run_summary.get("while_benchmarking") else "during the run"
    reasons = ", ".join(run_summary.get("throttle_reasons") or []) or "throttled"
    return (
        f"{label} was throttled {when}: {reasons} in {run_summary['throttled_samples']} of "
        f"{run_summary['samples']} samples, SM clock down to {run_summary.get('min_sm_mhz')} MHz"
    )


def comparison_warnings(summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Warnings for a comparison of runs (label -> summary): each throttled run, then each run whose median SM or
    memory clock while benchmarking was more than CLOCK_TOLERANCE below the fastest run's (the machine at its best:
    the state every run should have measured)."""
    warnings = [text for label, s in summaries.items() if (text := describe(label, s))]
    for key, what in (("median_sm_mhz", "SM"), ("median_mem_mhz", "memory")):
        clocks = {label: s[key] for label, s in summaries.items() if s.get(key)}
        if len(clocks) < 2:
            continue
        fastest = max(clocks, key=lambda label: clocks[label])
        for label, clock in clocks.items():
            if clock < (1 - CLOCK_TOLERANCE) * clocks[fastest]:
                warnings.append(
                    f"{label} ran its GPUs at a median {what} clock of {clock:.0f} MHz, below the "
                    f"{clocks[fastest]:.0f} MHz of {fastest}: it measured a slower machine than the runs it is "
                    "compared with"
                )
    return warnings


# ---- the server's metrics -------------------------------------------------------------------------------------

# The server's Prometheus gauges a benchmark cell samples (workers/benchclient/prometheus.py GAUGES, by the names the
# client reports them under): the only names taken from the host's report, and a ServerMetricSample's fields.
SERVER_METRIC_FIELDS = (
    "num_running_reqs",
    "num_queue_reqs",
    "num_used_tokens",
    "token_usage",
    "gen_throughput",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_steps",
    "spec_num_draft_tokens",
)
# A cell's report holds a bounded number of samples (the client thins past 2000); more is not a client of ours.
MAX_SERVER_METRIC_SAMPLES = 10_000
# An age beyond this is not a sample of the cell just run.
MAX_SAMPLE_AGE_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class ServerMetricReading:
    """The server's gauges at one instant of a benchmark cell, on the worker's clock (`t`, seconds since the epoch:
    the clock GpuReading and the cells carry, so the three share one time axis). None: not served (a baseline serves
    no spec_num_steps) or not a finite non-negative number."""

    t: float
    num_running_reqs: float | None = None
    num_queue_reqs: float | None = None
    num_used_tokens: float | None = None
    token_usage: float | None = None
    gen_throughput: float | None = None
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    spec_num_steps: float | None = None
    spec_num_draft_tokens: float | None = None

    def stored_fields(self) -> dict[str, float | None]:
        """The fields a ServerMetricSample row keeps (its `at` holds `t`)."""
        return {name: getattr(self, name) for name in SERVER_METRIC_FIELDS}


def _gauge(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def server_metric_readings(report: Any, written_at: float) -> list[ServerMetricReading]:
    """The readings of a benchmark client's `server_metrics` report (`{"fields": ["ago_s", ...], "samples":
    [[ago_s, ...], ...]}`, each sample dated by its age when the client wrote the result), on the worker's clock:
    `written_at` is when the worker received the result. The report comes from the host: only SERVER_METRIC_FIELDS
    are read, at most MAX_SERVER_METRIC_SAMPLES samples, a sample without a sound age is dropped, a value that is not
    a finite non-negative number is None; anything else is no readings, never an error."""
    if not isinstance(report, dict):
        return []
    fields, samples = report.get("fields"), report.get("samples")
    if not isinstance(fields, list) or not isinstance(samples, list) or not fields or fields[0] != "ago_s":
        return []
    columns = [(i, name) for i, name in enumerate(fields) if name in SERVER_METRIC_FIELDS]
    readings = []
    for sample in samples[:MAX_SERVER_METRIC_SAMPLES]:
        if not isinstance(sample, list) or len(sample) != len(fields):
            continue
        age = _gauge(sample[0])
        if age is None or age > MAX_SAMPLE_AGE_S:
            continue
        readings.append(ServerMetricReading(t=written_at - age, **{name: _gauge(sample[i]) for i, name in columns}))
    return sorted(readings, key=lambda r: r.t)


def server_metrics_summary(readings: Sequence[ServerMetricReading]) -> dict[str, Any]:
    """The answer above the server's series: how many samples, the most requests running and queued, the highest
    token usage, and the median of its windowed accept length (None for a baseline, which reports 0)."""

    def present(name: str) -> list[float]:
        return [v for r in readings if (v := getattr(r, name)) is not None]

    running, queued, usage = present("num_running_reqs"), present("num_queue_reqs"), present("token_usage")
    accept = [v for v in present("spec_accept_length") if v > 0]
    return {
        "samples": len(readings),
        "max_running_reqs": max(running) if running else None,
        "max_queue_reqs": max(queued) if queued else None,
        "max_token_usage": max(usage) if usage else None,
        "median_spec_accept_length": round(statistics.median(accept), 3) if accept else None,
    }
