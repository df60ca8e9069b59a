"""The demo's terminal: one line per state a run of the demo experiment reaches, then its verdicts."""

from __future__ import annotations

from django.core.management.base import OutputWrapper

from experiments.models import Experiment
from experiments.reads.reports import build_report


class DemoProgress:
    """One terminal line per state a run of the demo experiment reaches, then its verdicts once it is done."""

    def __init__(self, out: OutputWrapper, experiment: Experiment | None, base_url: str) -> None:
        self.out = out
        self.base_url = base_url
        self.experiment = experiment
        self.seen: dict[int, str] = {}
        self.done = experiment is None

    def report(self) -> None:
        if self.done or self.experiment is None:
            return
        runs = list(self.experiment.run_set.select_related("config").order_by("sequence"))
        for run in runs:
            if self.seen.get(run.pk) == run.state:
                continue
            self.seen[run.pk] = run.state
            failure = f": {run.failure_kind}, {run.failure_message[:160]}" if run.failure_kind else ""
            self.out.write(f"  run {run.pk} {run.config.name} (launch {run.launch_index + 1}): {run.state}{failure}")
        if runs and all(run.is_finished for run in runs):
            self.done = True
            self._verdicts()

    def _verdicts(self) -> None:
        assert self.experiment is not None
        rows = build_report(self.experiment, with_figures=False).rows
        if not rows:
            self.out.write("The demo experiment ended without a comparison (see the runs above).")
            return
        self.out.write("The demo experiment is done. Speedup over the baseline (95% interval):")
        for row in rows:
            interval = f" [{row.ci_low:.3f}, {row.ci_high:.3f}]" if row.ci_low is not None else ""
            self.out.write(
                f"  {row.candidate} at concurrency {row.concurrency}: {row.speedup:.3f}x{interval}, {row.verdict}"
            )
        self.out.write(f"Charts and verdicts: {self.base_url}{self.experiment.get_absolute_url()}")
