"""The files handed out for download, by the pages and the API alike: an experiment's comparison (CSV, and its JSON
with every table of its page), the experiment in the formats other tools read (EXPORT_KINDS) and the regression
flags (CSV). A serializer like the others (a noun in a file's format), so that the pages and the API, which may not
import each other, hand out the same bytes."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable
from typing import Any

from django.http import HttpResponse, JsonResponse

from experiments.formats import bench_serving_export, llmd_report, tracker_runs
from experiments.formats.exported_experiment import (
    ExportedCell,
    ExportedConfig,
    ExportedExperiment,
    server_args,
)
from experiments.models import Experiment, Flag, Run
from experiments.reads import samples
from experiments.reads.reports import MEASUREMENT_COLUMNS, ExperimentReport, build_report
from experiments.rules import launch_fields

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


def _json_text(body: Any) -> str:
    return json.dumps(body, allow_nan=False)


EXPORTED_PROFILE_FIELDS = (
    "dataset",
    "input_len",
    "output_len",
    "num_prompts",
    "concurrency",
    "passes",
    "launches",
    "seed",
    "temperature",
    "top_p",
    "warmup_requests",
)


# What other tools read, by the name of its download (`export.<kind>`): (the text, its media type).
EXPORT_KINDS: dict[str, tuple[Callable[[ExportedExperiment], str], str]] = {
    "llm-d.json": (lambda e: _json_text(llmd_report.benchmark_reports(e)), "application/json"),
    "bench-serving.jsonl": (bench_serving_export.bench_serving_lines, "application/jsonl"),
    "mlflow.json": (lambda e: _json_text(tracker_runs.mlflow_runs(e)), "application/json"),
    "wandb.json": (lambda e: _json_text(tracker_runs.wandb_runs(e)), "application/json"),
}


def experiment_export_response(experiment: Experiment, kind: str) -> HttpResponse:
    """The experiment as `kind` (one of EXPORT_KINDS) renders it; `experiment` should come with its host,
    baseline, profile and owner."""
    render, media_type = EXPORT_KINDS[kind]
    response = HttpResponse(render(exported_experiment(build_report(experiment, with_figures=False))),
                            content_type=media_type)  # fmt: skip
    response["Content-Disposition"] = f'attachment; filename="experiment-{experiment.pk}-{kind}"'
    return response


def exported_experiment(report: ExperimentReport) -> ExportedExperiment:
    """What the export formats read, from the report: its configs, the cells its comparison reads and its figures."""
    experiment, profile = report.experiment, report.experiment.profile
    runs = {run.pk: run for run in report.runs}
    ends = [run.finished_at for run in report.runs if run.finished_at is not None]
    inventory = experiment.host.gpu_inventory or []
    first_gpu = inventory[0] if inventory and isinstance(inventory[0], dict) else {}
    return ExportedExperiment(
        id=experiment.pk,
        name=experiment.name,
        status=report.status,
        created_at=experiment.created_at,
        ended_at=max(ends) if ends else None,
        owner=experiment.created_by.get_username() if experiment.created_by else None,
        tags=experiment.tag_list,
        host=experiment.host.name,
        gpu_model=str(first_gpu.get("name") or ""),
        baseline=report.baseline.name,
        profile={
            **{name: getattr(profile, name) for name in EXPORTED_PROFILE_FIELDS},
            "summary": profile.summary,
        },
        configs=[
            ExportedConfig(
                name=config.name,
                content_hash=config.content_hash,
                role="baseline" if config == report.baseline else "candidate",
                model_path=config.model_path,
                served_model_name=config.served_model_name,
                tp_size=config.tp_size,
                gpu_count=config.gpu_count,
                speculative=launch_fields.speculative_settings(config.engine, config.launch_spec()),
                engine=config.engine,
                extra_args=[str(arg) for arg in config.extra_args or []],
                # str() of a secret is its mask (rules/secrets.py): the export holds no secret's value.
                env={str(name): str(value) for name, value in (config.env or {}).items()},
            )
            for config in report.configs
        ],
        cells=[_exported_cell(m, runs[m["run_id"]]) for m in samples.usable(report.measurement_values)],
        comparison=comparison_rows_json(report.comparison),
        throughput=report.throughput_series,
        accept_length=report.accept_length_series,
        latency=report.latency,
    )


def _exported_cell(measurement: dict[str, Any], run: Run) -> ExportedCell:
    source = run.imported_from or {}
    return ExportedCell(
        config=measurement["run__config__name"],
        run=run.pk,
        launch=run.launch_index,
        values={column: measurement[column] for column in MEASUREMENT_COLUMNS},
        server_args=server_args(run.effective_args),
        tool=str(source.get("tool") or "") if run.is_imported else "specdash",
        tool_version=str(source.get("version") or "") if run.is_imported else "",
    )


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
