"""The draft's report card of an experiment or a study (`analysis.draft_report`): its rows and winners are the
experiment's one comparison (`reports.cached_report`) or the study's rows and recommendation (`tuning.recommend`,
as the bake-off reads them); its served figures are what the candidates' succeeded runs measured (each cell's
`mean_request_accept_length`, the first cell's per-request rows in `PromptResults`, the accepted-drafts histograms);
its training figures are the host's training directories as a worker read them (`training_directory_json` answers,
handed in by the caller: reads never ask a worker).

Queries: an experiment's report (cached) and one for its first cells; a study's history, its configs, its
measurements and its first cells."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import connection
from django.db.models import JSONField, Q
from django.db.models.expressions import RawSQL

from experiments.analysis import acceptance_positions, draft_report, draft_training
from experiments.analysis.comparison import ComparisonRow
from experiments.analysis.verdicts import COLLAPSED
from experiments.models import Experiment, PromptResults, Run, ServerConfig, Study, StudyConfig
from experiments.reads import samples
from experiments.reads.bakeoff import study_winners
from experiments.reads.reports import cached_report
from experiments.reads.study_report import study_history
from experiments.tuning import plan, recommend


def experiment_draft_report(
    experiment: Experiment, directories: Sequence[Mapping[str, Any]], training_note: str = ""
) -> draft_report.DraftReport:
    """The card of the experiment's speculative candidates with a draft (simulated acceptance left out: it is not
    the draft's), over its one comparison; `directories` the host's training listing ([] and `training_note`'s
    reason when it was not read)."""
    report = cached_report(experiment)
    comparison = report.comparison
    drafts = {
        c.pk: c
        for c in report.candidates
        if c.is_speculative and c.speculative_draft_model_path and c.simulated_accept_length is None
    }
    names = {pk: c.name for pk, c in drafts.items()}
    positions = report.positions.rows if report.positions else []
    candidates = _candidates(
        drafts,
        names,
        samples.usable(report.measurement_values),
        positions,
        _first_cells(Q(run__experiment=experiment), names),
    )
    return draft_report.build(
        candidates,
        draft_training.training_checkpoints(directories),
        rows=comparison.rows,
        winners=comparison.winners(),
        may_win=comparison.may_win,
        reasons=comparison.reasons,
        training_note=training_note,
    )


def study_draft_report(
    study: Study, directories: Sequence[Mapping[str, Any]], training_note: str = ""
) -> draft_report.DraftReport:
    """The card over the study's rows (`recommend.rows`) and recommendation: what its own page and API say. A config
    may win unless its outputs differ, its runs are degenerate (the study's races' rule) or its acceptance collapsed
    (the experiments' rule, `verdicts.COLLAPSED`, on the same token-weighted mean)."""
    history = study_history(study)
    settings = study.plan_settings()
    rows = recommend.rows(history, settings)
    winners = study_winners(history, settings, rows)
    configs = {sc.config_id: sc for sc in StudyConfig.objects.filter(study=study).select_related("config")}
    drafts = {
        pk: sc.config
        for pk, sc in configs.items()
        if sc.config.is_speculative and sc.config.speculative_draft_model_path and pk != study.baseline_id
    }
    names = {pk: configs[pk].name for pk in drafts}
    where = Q(run__experiment__studyround__study=study, run__config_id__in=list(names))
    values = [
        {**value, "run__config__name": names[value["run__config_id"]]}
        for value in samples.usable(
            samples.measurement_values(where, "mean_request_accept_length", *acceptance_positions.COLUMNS)
        )
    ]
    view = acceptance_positions.positions_view(values, plan.BASELINE, list(names.values()))
    collapsed = _collapsed(values)

    def reasons(row: ComparisonRow) -> list[str]:
        out = []
        if row.candidate in history.outputs_differ:
            out.append("its outputs differ from the baseline's at temperature 0")
        if (row.candidate, row.concurrency) in collapsed:
            accept = collapsed[row.candidate, row.concurrency]
            out.append(f"its acceptance collapsed (accept length {accept:.2f}: the target rejected every draft token)")
        if row.candidate in history.degenerate:
            out.append(f"its runs are degenerate: {history.degenerate[row.candidate]}")
        return out

    def may_win(row: ComparisonRow) -> bool:
        return (
            row.candidate not in history.outputs_differ
            and row.candidate not in history.degenerate
            and (row.candidate, row.concurrency) not in collapsed
        )

    candidates = _candidates(drafts, names, values, view.rows if view else [], _first_cells(where, names))
    return draft_report.build(
        candidates,
        draft_training.training_checkpoints(directories),
        rows=rows,
        winners=winners,
        may_win=may_win,
        reasons=reasons,
        training_note=training_note,
    )


def _candidates(
    configs: Mapping[int, ServerConfig],
    names: Mapping[int, str],
    usable: Iterable[Mapping[str, Any]],
    positions: Iterable[acceptance_positions.PositionRow],
    first_cells: Mapping[str, tuple[dict[str, list[float]], list[int]]],
) -> list[draft_report.DraftCandidate]:
    cells: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for value in usable:
        figure = value.get("mean_request_accept_length")
        if isinstance(figure, int | float) and figure > 0:
            cells[value["run__config__name"]][value["concurrency"]].append(float(figure))
    rates: dict[str, dict[int, list[float]]] = defaultdict(dict)
    for row in positions:
        if row.category is None:
            rates[row.config][row.concurrency] = row.rates
    out = []
    for pk, config in configs.items():
        name = names[pk]
        requests, levels = first_cells.get(name, ({}, []))
        out.append(
            draft_report.DraftCandidate(
                name=name,
                draft_path=config.speculative_draft_model_path,
                algorithm=config.speculative_algorithm,
                steps=config.speculative_num_steps,
                topk=config.speculative_eagle_topk,
                draft_tokens=config.speculative_num_draft_tokens,
                requests=requests,
                first_cells=tuple(sorted(set(levels))),
                by_concurrency={level: sum(v) / len(v) for level, v in sorted(cells[name].items())},
                positions=dict(sorted(rates[name].items())),
            )
        )
    return out


def _first_cells(runs: Q, names: Mapping[int, str]) -> dict[str, tuple[dict[str, list[float]], list[int]]]:
    """Per config name: the per-request accept lengths of the first cell of each succeeded run, by prompt category
    ("" when none), and those cells' concurrency. On PostgreSQL only each request's category, accept length and ok
    are read (a greedy run's rows also keep every output token id: megabytes no card needs)."""
    if not names:
        return {}
    results = PromptResults.objects.filter(runs, run__state=Run.State.SUCCEEDED, run__config_id__in=list(names))
    if connection.vendor == "postgresql":
        column = f'"{PromptResults._meta.db_table}"."requests"'
        picked = RawSQL(
            "(SELECT coalesce(jsonb_agg(jsonb_build_array(e->'category', e->'accept_length', e->'ok')), '[]'::jsonb)"
            f" FROM jsonb_array_elements(CASE WHEN jsonb_typeof({column}) = 'array' THEN {column}"
            " ELSE '[]'::jsonb END) e)",
            [],
            output_field=JSONField(),
        )
        rows: Iterable[tuple[int, int, list[Any]]] = results.annotate(picked=picked).values_list(
            "run__config_id", "concurrency", "picked"
        )
    else:
        rows = (
            (config_id, level, [[r.get("category"), r.get("accept_length"), r.get("ok")] for r in requests])
            for config_id, level, requests in results.values_list("run__config_id", "concurrency", "requests")
        )
    out: dict[str, tuple[dict[str, list[float]], list[int]]] = {}
    for config_id, level, figures in rows:
        by_category, levels = out.setdefault(names[config_id], ({}, []))
        levels.append(level)
        for category, accept, ok in figures or []:
            if ok is True and isinstance(accept, int | float) and not isinstance(accept, bool) and accept > 0:
                by_category.setdefault(category if isinstance(category, str) else "", []).append(float(accept))
    return out


def _collapsed(usable: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], float]:
    """(config, concurrency) -> its mean token-weighted accept length where it is at most COLLAPSED (as `judge`
    reads it: the mean over usable cells with a positive figure)."""
    accepts: dict[tuple[str, int], list[float]] = defaultdict(list)
    for value in usable:
        accept = value.get("accept_length")
        if isinstance(accept, int | float) and accept > 0:
            accepts[value["run__config__name"], value["concurrency"]].append(float(accept))
    means = {key: sum(v) / len(v) for key, v in accepts.items()}
    return {key: mean for key, mean in means.items() if mean <= COLLAPSED}
