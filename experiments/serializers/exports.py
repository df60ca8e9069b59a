"""The files handed out for download, by the pages and the API alike: an experiment's comparison (CSV, and its JSON
with every table of its page) and the regression flags (CSV). A serializer like the others (a noun in a file's
format), so that the pages and the API, which may not import each other, hand out the same bytes."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import Any

from django.http import HttpResponse, JsonResponse

from experiments.models import Experiment, Flag
from experiments.reads.reports import build_report

from .comparisons import comparison_rows_json
from .experiments import experiment_export_json

# The comparison's columns, in order; the rows carry a few more (sample counts, runs needed) that the CSV leaves out.
COMPARISON_COLUMNS = (
    "candidate",
    "concurrency",
    "baseline_tok_s",
    "candidate_tok_s",
    "speedup",
    "ci_low",
    "ci_high",
    "verdict",
)
FLAG_COLUMNS = (
    "id",
    "created_at",
    "host",
    "config",
    "config_hash",
    "profile",
    "concurrency",
    "direction",
    "change",
    "baseline_mean",
    "new_mean",
    "kind",
    "run",
    "experiment",
    "triage",
    "assignee",
)
# The flag filters a download may name; anything else (the list treats it as "all") never reaches a header.
FLAG_EXPORT_STATES = ("open", *Flag.Triage.values, "all")
# A spreadsheet runs a cell that starts with one of these as a formula (OWASP "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def comparison_csv_response(experiment: Experiment) -> HttpResponse:
    rows = comparison_rows_json(build_report(experiment, with_figures=False).comparison)
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="experiment-{experiment.pk}-comparison.csv"'
    writer = csv.DictWriter(response, fieldnames=COMPARISON_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows({key: _cell(value) for key, value in row.items()} for row in rows)
    return response


def comparison_json_response(experiment: Experiment) -> JsonResponse:
    """The experiment's JSON and every table of its page; `experiment` should come with its host, baseline and
    profile."""
    response = JsonResponse(experiment_export_json(build_report(experiment, with_figures=False)))
    response["Content-Disposition"] = f'attachment; filename="experiment-{experiment.pk}.json"'
    return response


def flags_csv_response(flags: Iterable[Flag], *, state: str) -> HttpResponse:
    """`flags` as CSV, one row each; `flags` should come with their host, config, assignee and run."""
    state = state if state in FLAG_EXPORT_STATES else "all"
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="flags-{state}.csv"'
    writer = csv.writer(response)
    writer.writerow(FLAG_COLUMNS)
    for f in flags:
        writer.writerow(
            _cells([f.pk, f.created_at.isoformat(), f.host.name, f.config.name, f.config_hash, f.profile_label,
             f.concurrency, f.direction, round(f.change, 4), round(f.baseline_mean, 3), round(f.new_mean, 3),
             f.kind, f.run_id, f.run.experiment_id, f.triage, f.assignee.username if f.assignee else ""])
        )  # fmt: skip
    return response


def _cell(value: Any) -> Any:
    """`value`, with a text that a spreadsheet would run as a formula prefixed by `'` (OWASP's rule).

    Only text is touched: numbers are written as numbers, so a negative change stays a number in the sheet.
    """
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _cells(row: Iterable[Any]) -> list[Any]:
    return [_cell(value) for value in row]
