"""Acceptance per draft position on the experiment page and in its JSON: per config and concurrency (and per prompt
category), the accepted-drafts histograms of the cells measured there summed (every pass of every launch), and the
share of their verify steps that accepted draft 1, 2, 3 ... (`analysis/acceptance.py` defines both). Read from the
measurements the report has already queried: no query of its own."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from experiments.analysis import acceptance
from experiments.charts import comparison as comparison_charts
from experiments.charts import positions as position_charts

COLUMNS = ("accepted_drafts_histogram", "position_acceptance", "position_acceptance_by_category")


@dataclass
class PositionRow:
    config: str
    concurrency: int
    category: str | None
    cells: int
    histogram: list[int]
    # The rates as percentages, one per column of the page's table (None past this row's own positions).
    percentages: list[float | None] = field(default_factory=list)

    @property
    def verify_steps(self) -> int:
        return sum(self.histogram)

    @property
    def rates(self) -> list[float]:
        return acceptance.position_rates(self.histogram)

    def as_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "concurrency": self.concurrency,
            "category": self.category,
            "cells": self.cells,
            "accepted_drafts_histogram": self.histogram,
            "position_acceptance": self.rates,
        }


@dataclass
class PositionsView:
    rows: list[PositionRow]
    by_category: list[PositionRow]
    baseline: str
    candidates: list[str] = field(default_factory=list)

    @property
    def positions(self) -> list[int]:
        """1 .. the most draft positions of any row: the table's columns."""
        return list(range(1, max(len(row.histogram) for row in [*self.rows, *self.by_category])))

    def __post_init__(self) -> None:
        columns = len(self.positions)
        for row in [*self.rows, *self.by_category]:
            rates: list[float | None] = [rate * 100 for rate in row.rates]
            row.percentages = rates + [None] * (columns - len(rates))

    @functools.cached_property
    def figure(self) -> dict[str, Any]:
        colors = comparison_charts.config_colors(self.baseline, self.candidates)
        return position_charts.position_figure([(r.config, r.concurrency, r.rates) for r in self.rows], colors=colors)

    def as_json(self) -> dict[str, Any]:
        return {"cells": [r.as_json() for r in self.rows], "by_category": [r.as_json() for r in self.by_category]}


def positions_view(
    usable: Iterable[Mapping[str, Any]], baseline: str, candidates: Sequence[str]
) -> PositionsView | None:
    """From the report's usable measurements (their `run__config__name`, `concurrency` and COLUMNS); None when no
    cell has a histogram (a baseline, a server that reports none)."""
    cells: dict[tuple[str, int, str | None], list[list[int]]] = {}
    for m in usable:
        key = (m["run__config__name"], m["concurrency"])
        if m["accepted_drafts_histogram"]:
            cells.setdefault((*key, None), []).append(m["accepted_drafts_histogram"])
        for category, figures in (m["position_acceptance_by_category"] or {}).items():
            if figures.get("accepted_drafts_histogram"):
                cells.setdefault((*key, category), []).append(figures["accepted_drafts_histogram"])
    if not cells:
        return None
    order = {name: i for i, name in enumerate([baseline, *candidates])}
    rows = [
        PositionRow(config, level, category, len(histograms), _summed(histograms))
        for (config, level, category), histograms in cells.items()
    ]
    rows.sort(key=lambda r: (r.category or "", order.get(r.config, len(order)), r.concurrency))
    return PositionsView(
        rows=[r for r in rows if r.category is None],
        by_category=[r for r in rows if r.category is not None],
        baseline=baseline,
        candidates=list(candidates),
    )


def _summed(histograms: Iterable[list[int]]) -> list[int]:
    total: list[int] = []
    for histogram in histograms:
        total.extend([0] * (len(histogram) - len(total)))
        for accepted, steps in enumerate(histogram):
            total[accepted] += steps
    return total
