"""A benchmark cell's results as the worker brings them from the host: checked, stored, and warned about."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from ..analysis import acceptance, degenerate, slo, steady_state
from ..models import Measurement, PromptResults, Run
from .runs import do_add_run_warning


@transaction.atomic
def do_record_measurement(run: Run, pass_index: int, concurrency: int, result: dict[str, Any]) -> Measurement:
    fields = {name: result.get(name) for name in Measurement.LATENCY_FIELDS}
    # Per-position acceptance comes from a script on the host: a figure that fails its check is stored as null,
    # with a run warning, and never stops the rest of the cell from being stored.
    positions, problems = acceptance.position_fields(result)
    fields |= positions
    # So are the steady-state figures: one that is not a finite non-negative number is null, here and in `raw`.
    steady, steady_problems = steady_state.checked_figures(result)
    problems += steady_problems
    fields |= steady
    # The request rows have a column of their own (a cell of a thousand requests should not weigh on `raw`).
    requests, request_problems = slo.checked_requests(result.get("requests"))
    problems += request_problems
    ended_at = _ended_at(result.get("ended_at"))
    result = {**acceptance.with_checked_positions(result, positions), **steady}
    result.pop("requests", None)
    result.pop("ended_at", None)
    measurement, _ = Measurement.objects.update_or_create(
        run=run,
        pass_index=pass_index,
        concurrency=concurrency,
        defaults=dict(
            completed=result["completed"],
            failed=result.get("failed", 0),
            duration_s=result["duration_s"],
            output_throughput=result["output_throughput"],
            total_throughput=result["total_throughput"],
            request_throughput=result["request_throughput"],
            input_throughput=result.get("input_throughput", 0.0),
            accept_length=result.get("accept_length"),
            pooled_accept_length=result.get("pooled_accept_length"),
            mean_request_accept_length=result.get("mean_request_accept_length"),
            server_accept_length=result.get("server_accept_length"),
            server_mean_e2e_latency_ms=result.get("server_mean_e2e_latency_ms"),
            server_decode=result.get("server_decode") or {},
            raw=result,
            requests=requests,
            ended_at=ended_at,
            **fields,
        ),
    )
    for problem in problems:
        do_add_run_warning(run, "host_output", f"Concurrency {concurrency}, pass {pass_index + 1}: {problem}")
    return measurement


def _ended_at(stamp: Any) -> datetime | None:
    # The worker's own time.time(), so a number; anything else is no stamp rather than a guessed one.
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp) or stamp <= 0:
        return None
    return datetime.fromtimestamp(stamp, UTC)


def do_record_prompt_results(run: Run, pass_index: int, concurrency: int, requests: list[dict[str, Any]]) -> None:
    """Each prompt's result of one cell (its category, output length, accept length and, at temperature 0, its
    output token ids): the per-prompt view and what the equivalence gate compares."""
    PromptResults.objects.update_or_create(
        run=run, defaults={"pass_index": pass_index, "concurrency": concurrency, "requests": requests}
    )
    do_check_degenerate(run, requests)


@transaction.atomic
def do_check_degenerate(run: Run, requests: list[dict[str, Any]]) -> None:
    """Store the run's degenerate-benchmark findings (analysis/degenerate.py), read from its prompt results as they
    are recorded: the only findings any comparison reads (`Run.degenerate_findings`). A candidate's template is checked
    against the experiment's first baseline run with prompt results; a baseline run's rows, once recorded, re-check
    the template of the candidates' runs recorded before it."""
    experiment = run.experiment
    recorded = PromptResults.objects.filter(run__experiment=experiment).exclude(run=run)
    if run.config_id == experiment.baseline_id:
        _store_findings(run, requests, None)
        others = recorded.exclude(run__config_id=experiment.baseline_id).select_related("run__config")
        for other in others.defer("digests"):
            _store_findings(other.run, other.requests, requests)
        return
    first_baseline = (
        recorded.filter(run__config_id=experiment.baseline_id).order_by("run__sequence").values_list("requests").first()
    )
    _store_findings(run, requests, first_baseline[0] if first_baseline else None)


def _store_findings(run: Run, requests: list[dict[str, Any]], baseline_rows: list[dict[str, Any]] | None) -> None:
    config = run.config
    findings = degenerate.check_run(
        requests if isinstance(requests, list) else [],
        baseline_rows=baseline_rows if isinstance(baseline_rows, list) else None,
        speculative=config.is_speculative,
        # Simulated acceptance writes one token for everything a verify step accepts: degenerate by design.
        check_outputs=config.simulated_accept_length is None,
    )
    stored = [finding.as_json() for finding in findings]
    if stored != run.degenerate_findings:
        run.degenerate_findings = stored
        run.save(update_fields=["degenerate_findings"])
