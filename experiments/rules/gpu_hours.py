"""How many GPU-hours launches take of a host, for the daily quotas: what finished launches took, and what queued or
running ones may still take at most.

A launch's GPU-hours are the GPUs its server occupies (tp x pp x dp) times its time on the host. A launch that has
not finished counts as its *reservation*: the longest the worker lets it hold the host, from its profile's
timeouts. That is an upper bound, not a forecast (most launches take a fraction of it), chosen so that no profile
can hold a host for longer than the quota it was admitted under: a member who lowers `request_timeout_s` reserves
less. Once a launch ends, only the time it really took counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

# The worker's allowance per benchmark cell beyond its waves of requests: the warm-up requests.
CELL_MARGIN_S = 60
# Connecting, preflight, verification (a smoke generation) and teardown (SIGTERM, wait, SIGKILL, the GPU check):
# minutes at most; ten is the allowance beyond the readiness timeout (loading) and the benchmark cells.
LAUNCH_OVERHEAD_S = 600
# The daily quotas look back this far: what launches that started since took, and what pending ones reserve.
WINDOW = timedelta(hours=24)


def cell_time_bound_s(num_prompts: int, concurrency: int, request_timeout_s: float) -> float:
    """The longest one benchmark cell may take: every wave of `concurrency` requests may take a whole request
    timeout (one wave more for the remainder), then the margin for the warm-up. The worker stops a cell there."""
    waves = max(1, num_prompts // max(1, concurrency) + 1)
    return request_timeout_s * waves + CELL_MARGIN_S


@dataclass(frozen=True)
class LaunchShape:
    """What bounds one launch: its GPUs (from the config) and its profile's repetitions and timeouts."""

    gpus: int
    concurrency: Sequence[int]
    passes: int
    num_prompts: int
    request_timeout_s: float
    readiness_timeout_s: float

    @property
    def time_bound_s(self) -> float:
        """Loading (the readiness timeout), every (pass, concurrency) cell at its bound, and the overhead."""
        cells = sum(cell_time_bound_s(self.num_prompts, level, self.request_timeout_s) for level in self.concurrency)
        return self.readiness_timeout_s + max(1, self.passes) * cells + LAUNCH_OVERHEAD_S

    @property
    def gpu_hours_bound(self) -> float:
        return max(1, self.gpus) * self.time_bound_s / 3600


@dataclass(frozen=True)
class LaunchSpan:
    """One launch as the quota sees it: its GPUs, when it started and ended (None: not yet), and its bound."""

    gpus: int
    started_at: datetime | None
    finished_at: datetime | None
    is_finished: bool
    time_bound_s: float


def launch_gpu_hours(span: LaunchSpan, now: datetime) -> float:
    """A finished launch: its real time (none if it never started, e.g. cancelled while queued). A pending one: its
    reservation, or the time it has already taken if that is longer (a teardown that overran)."""
    gpus = max(1, span.gpus)
    if span.is_finished:
        if span.started_at is None:
            return 0.0
        end = span.finished_at or now
        return gpus * max(0.0, (end - span.started_at).total_seconds()) / 3600
    elapsed = (now - span.started_at).total_seconds() if span.started_at is not None else 0.0
    return gpus * max(span.time_bound_s, elapsed) / 3600


def gpu_hours_used(spans: Iterable[LaunchSpan], now: datetime) -> float:
    """What counts against a daily quota at `now`: the finished launches that started within WINDOW, at their real
    time, and every pending launch at its reservation (the caller passes both kinds, and nothing older)."""
    total = 0.0
    for span in spans:
        if span.is_finished and (span.started_at is None or span.started_at < now - WINDOW):
            continue
        total += launch_gpu_hours(span, now)
    return total
