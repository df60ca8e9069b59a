"""The one sample builder: which measurements say something about speed, and the `analysis.Sample` each one is.
Every comparison (the experiment page and its API and export, Compare, the experiments table, a study's rounds, an
adaptive schedule's verification) reads its measurements through here, so a pass counts or does not count the same
way everywhere.

A usable sample is a pass of a run that succeeded whose output throughput is positive and finite
(`analysis.is_usable`): a pass whose requests all failed (0 tok/s) is shown in the measurements, never averaged in.
A launch's value at a concurrency (what a study's racing reads) is the mean of its usable passes there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from django.db.models import Q

from experiments import analysis
from experiments.analysis import degenerate
from experiments.models import Measurement, Run

# What a sample is made of; `measurement_values` reads these and whatever else a page needs.
SAMPLE_FIELDS = (
    "run_id",
    "run__config_id",
    "run__config__name",
    "run__experiment_id",
    "run__launch_index",
    "run__state",
    "pass_index",
    "concurrency",
    "output_throughput",
    "accept_length",
    # Why the run measures a degenerate benchmark (Run.degenerate_findings; `degenerate_reasons` reads it).
    "run__degenerate_findings",
)
Value = Mapping[str, Any]
V = TypeVar("V", bound=Value)


def measurement_values(which: Q, *extra: str, succeeded: bool = False) -> list[dict[str, Any]]:
    """The measurements `which` selects as plain values (SAMPLE_FIELDS and `extra`), in the runs' order: one query.
    `succeeded` leaves out, in the database, the runs that did not succeed (what a page that shows only the
    comparison needs); without it every measurement is read, for pages that list them all."""
    rows = Measurement.objects.filter(which)
    if succeeded:
        rows = rows.filter(run__state=Run.State.SUCCEEDED)
    fields = dict.fromkeys((*SAMPLE_FIELDS, *extra))
    return list(rows.order_by("run__sequence", "pass_index", "concurrency").values(*fields))


def is_usable(value: Value) -> bool:
    return value["run__state"] == Run.State.SUCCEEDED and analysis.is_usable(value["output_throughput"])


def usable(values: Iterable[V]) -> list[V]:
    return [value for value in values if is_usable(value)]


def by_config_name(value: Value) -> str:
    return value["run__config__name"]


def samples(values: Iterable[Value], label: Callable[[Value], str | None] = by_config_name) -> list[analysis.Sample]:
    """One sample per usable value, named by `label` (a config's name by default; None leaves the value out)."""
    out = []
    for value in values:
        name = label(value)
        if name is None or not is_usable(value):
            continue
        out.append(
            analysis.Sample(
                name,
                value["concurrency"],
                value["run__launch_index"],
                value["pass_index"],
                value["output_throughput"],
                value.get("accept_length"),
            )
        )
    return out


def launch_means(values: Sequence[Value]) -> dict[int, dict[int, float]]:
    """Per run: its value at each concurrency, the mean of its usable passes there (a run is one launch of one
    config). A run with no usable pass has no entry."""
    sums: dict[int, dict[int, list[float]]] = {}
    for value in usable(values):
        sums.setdefault(value["run_id"], {}).setdefault(value["concurrency"], []).append(value["output_throughput"])
    return {run: {level: sum(v) / len(v) for level, v in cells.items()} for run, cells in sums.items()}


def degenerate_reasons(
    values: Iterable[Value], label: Callable[[Value], str | None] = by_config_name
) -> dict[str, str]:
    """Per name (as `samples` names them): why its runs measure a degenerate benchmark, read from the runs of the
    usable `values` (`degenerate.config_reasons`: one flagged run flags its config), for `analysis.judge`."""
    runs: dict[tuple[int, str], tuple[str, Any]] = {}
    for value in values:
        name = label(value)
        if name is not None and is_usable(value) and (value["run_id"], name) not in runs:
            runs[value["run_id"], name] = (name, value.get("run__degenerate_findings") or [])
    return degenerate.config_reasons(runs.values())
