"""What an adaptive schedule's page and GET /api/schedules/{id} show: per concurrency, whether the adaptive server
matches that band's static winner within the source's precision (from the verification experiment's interleaved
launches), the server switching its steps (`sglang:spec_num_steps` over the adaptive launches), the JSON and its
diff against the previous version. Reads only, a fixed number of queries whatever the runs."""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from experiments import analysis
from experiments.analysis import verdicts
from experiments.charts.schedules import switching_figure
from experiments.models import AdaptiveSchedule, Experiment, Run, ServerMetricSample
from experiments.reads import samples
from experiments.tuning import plan

# The answers of `Comparison.within_tolerance`, and a level not measured yet.
MATCHES, SLOWER, UNDECIDED, NOT_MEASURED = verdicts.MATCHES, verdicts.SLOWER, verdicts.UNDECIDED, "not measured"
_ADAPTIVE, _WINNER = "adaptive", "winner"


@dataclass(frozen=True)
class LevelCheck:
    """The adaptive server against the static winner of the band holding `concurrency`."""

    concurrency: int
    winner: str  # the winner's config name ("no speculation" for the baseline)
    verdict: str
    speedup: float | None = None  # adaptive / winner, the centre of the interval
    ci_low: float | None = None
    ci_high: float | None = None
    launches: int = 0  # launches of the adaptive server measured here
    # The comparison's own verdict of the same row (faster, slower, inconclusive): what the verification experiment's
    # page says of it where the winner is its baseline.
    speed_verdict: str = ""

    @property
    def text(self) -> str:
        if self.speedup is None:
            return f"c = {self.concurrency}: not measured yet against {self.winner}"
        return (
            f"c = {self.concurrency}: {analysis.ratio_text(self.speedup, self.ci_low, self.ci_high)} of {self.winner}"
        )


@dataclass
class ScheduleView:
    schedule: AdaptiveSchedule
    checks: list[LevelCheck]
    status: str  # the verification experiment's
    previous: AdaptiveSchedule | None
    diff: list[str] = field(default_factory=list)
    figure: dict[str, Any] | None = None
    ramp_note: str = ""

    @property
    def matches(self) -> bool:
        return bool(self.checks) and all(c.verdict == MATCHES for c in self.checks)

    @property
    def verdict(self) -> str:
        """matches (every concurrency), slower (at some), unsettled (more launches would say), or pending."""
        if any(c.verdict == SLOWER for c in self.checks):
            return SLOWER
        if self.matches:
            return MATCHES
        return "unsettled" if any(c.speedup is not None for c in self.checks) else "pending"

    @property
    def sentence(self) -> str:
        """The answer the page leads with."""
        tolerance = f"{self.schedule.tolerance:.0%}"
        measured = [c for c in self.checks if c.speedup is not None]
        if not measured:
            return (
                f"Not verified yet: the verification experiment ({self.status}) has not measured the adaptive server "
                "against the band winners."
            )
        each = "; ".join(c.text for c in self.checks)
        if self.matches:
            return f"The schedule matches each band's static winner within {tolerance} at every concurrency: {each}."
        slower = [c for c in self.checks if c.verdict == SLOWER]
        if slower:
            where = ", ".join(f"c = {c.concurrency}" for c in slower)
            return f"The schedule is more than {tolerance} slower than the band's static winner at {where}: {each}."
        slower_than_winner = [c for c in measured if c.speed_verdict == SLOWER]
        known = ""
        if slower_than_winner:
            where = ", ".join(f"c = {c.concurrency}" for c in slower_than_winner)
            known = (
                f"; it is slower than the band's winner at {where} (whether by more than {tolerance} is not settled)"
            )
        return (
            f"Not settled: the schedule is not yet shown within {tolerance} of each band's static winner "
            f"(more launches would settle it){known}: {each}."
        )


def schedules_about(experiment: Experiment) -> tuple[list[AdaptiveSchedule], list[AdaptiveSchedule]]:
    """The schedules built from `experiment` (by version) and those it verifies: one query, for the experiment page
    (which shows them in two places, one of them only where a schedule can be built)."""
    schedules = list(
        AdaptiveSchedule.objects.filter(Q(experiment=experiment) | Q(verification=experiment)).order_by("version", "id")
    )
    built = [s for s in schedules if s.experiment_id == experiment.pk]
    return built, [s for s in schedules if s.verification_id == experiment.pk]


def schedule_view(schedule: AdaptiveSchedule, *, with_figure: bool = True) -> ScheduleView:
    previous = schedule.previous()
    experiment = schedule.verification
    runs: list[Run] = []
    checks: list[LevelCheck] = []
    figure = None
    if experiment is not None:
        fields = ("id", "experiment_id", "state", "config_id", "launch_index", "sequence")
        runs = list(experiment.run_set.only(*fields).order_by("sequence"))
        adaptive_ids = {r.config_id for r in runs} & set(schedule.server_configs.values_list("pk", flat=True))
        checks = _checks(schedule, runs, adaptive_ids, experiment.profile.concurrency)
        if with_figure:
            figure = switching_figure(_switching([r for r in runs if r.config_id in adaptive_ids]))
    diff = []
    if previous is not None:
        diff = list(
            difflib.unified_diff(
                previous.config_json.splitlines(), schedule.config_json.splitlines(),
                f"v{previous.version}", f"v{schedule.version}", lineterm="",
            )
        )  # fmt: skip
    status = experiment.status_of(runs) if experiment is not None else "not queued"
    return ScheduleView(schedule, checks, status, previous, diff, figure, ramp_note(schedule.bands))


def winner_of(bands: list[dict[str, Any]], concurrency: int) -> dict[str, Any] | None:
    return next((b for b in bands if int(b["low"]) <= concurrency <= int(b["high"])), None)


def _checks(schedule: AdaptiveSchedule, runs: list[Run], adaptive_ids: set[int], levels: list[int]) -> list[LevelCheck]:
    config_of = {r.pk: r.config_id for r in runs}
    values = samples.measurement_values(Q(run_id__in=list(config_of)), succeeded=True)
    out = []
    for level in sorted(int(c) for c in levels):
        band = winner_of(schedule.bands, level)
        if band is None:
            continue

        def side(value: Mapping[str, Any], band: dict[str, Any] = band, level: int = level) -> str | None:
            if value["concurrency"] != level:
                return None
            config = config_of[value["run_id"]]
            return _ADAPTIVE if config in adaptive_ids else _WINNER if config == band["config_id"] else None

        label = "no speculation" if band["config"] == plan.BASELINE else str(band["config"])
        own = samples.samples(values, label=side)
        comparison = analysis.judge(own, baseline=_WINNER, candidates=[_ADAPTIVE], passes_per_launch=1)
        if not comparison.rows:
            out.append(LevelCheck(level, label, NOT_MEASURED))
            continue
        row = comparison.rows[0]
        launches = len({s.launch for s in own if s.config == _ADAPTIVE})
        verdict = comparison.within_tolerance(row, schedule.tolerance)
        out.append(LevelCheck(level, label, verdict, row.speedup, row.ci_low, row.ci_high, launches, row.verdict))
    return out


def _switching(runs: list[Run]) -> dict[str, list[tuple[float, float | None, float | None]]]:
    samples = ServerMetricSample.objects.filter(run_id__in=[r.pk for r in runs]).order_by("run_id", "at")
    series: dict[str, list[tuple[float, float | None, float | None]]] = {}
    starts: dict[int, Any] = {}
    labels = {r.pk: f"launch {r.launch_index + 1} (run {r.pk})" for r in runs}
    for run_id, at, steps, running in samples.values_list("run_id", "at", "spec_num_steps", "num_running_reqs"):
        start = starts.setdefault(run_id, at)
        series.setdefault(labels[run_id], []).append(((at - start).total_seconds(), steps, running))
    return series


def ramp_note(bands: list[dict[str, Any]]) -> str:
    """Where a band's ramp-up and drain run another band's steps: slots are keyed at each band's lowest
    concurrency, so the batches of a higher band's load below its low bound (while requests start and finish) are
    routed to the slot below."""
    ordered = sorted(bands, key=lambda b: int(b["low"]))
    pairs = [(low, up) for low, up in itertools.pairwise(ordered) if low["steps"] != up["steps"]]
    if not pairs:
        return ""
    said = "; ".join(
        f"while a c = {up['low']} load ramps up and drains, its batches below {up['low']} run the {low['steps']} "
        f"step(s) of {_label(low)}, not its own {up['steps']}"
        for low, up in pairs
    )
    return f"Slots are keyed at each band's lowest concurrency, so {said}. The verification measures what that costs."


def _label(band: dict[str, Any]) -> str:
    return f"c = {band['low']}" if band["low"] == band["high"] else f"{band['low']} <= c <= {band['high']}"
