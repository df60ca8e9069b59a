"""Compare anything comparable: runs, or an experiment's config (all its runs of that config), picked from any
experiments whose profiles share a request shape (`BenchmarkProfile.series_key`: dataset, lengths, prompts, seed,
warm-up). The first pick is the reference the others are compared with, as an experiment's baseline is.

The statistics, figures and config diff are those of the experiment page (`analysis`, `charts`, `reports`), read
in a fixed number of queries: the picked runs, the picked experiments, their configs, and the measurements.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from experiments import analysis
from experiments.analysis import deployment as analysis_deployment
from experiments.analysis.cells import latency_table, points_series
from experiments.analysis.config_diff import ConfigDiffRow, DiffCell, config_diff_rows
from experiments.analysis.deployment_view import curves_of
from experiments.charts import comparison as comparison_charts
from experiments.charts import deployment as deployment_charts
from experiments.models import Candidate, Experiment, Measurement, Run, ServerConfig
from experiments.reads import samples

MAX_PICKS = 8
_PICK = re.compile(r"r(\d{1,12})|c(\d{1,12})-(\d{1,12})")
# A pick as the API's schema states it (ASCII digits, no blanks around it).
PICK_PATTERN = "^(r[0-9]{1,12}|c[0-9]{1,12}-[0-9]{1,12})$"


class NotComparable(Exception):
    """The picks cannot be compared; the message says why, for the page."""


class PickNotFound(NotComparable):
    """A pick names no run, or no config of the experiment it names."""


class PicksDiffer(NotComparable):
    """The picks were measured with different request shapes."""


@dataclass(frozen=True)
class Pick:
    """A run (`r<run id>`) or an experiment's config (`c<experiment id>-<config id>`), as written in the address."""

    token: str
    run_id: int | None = None
    experiment_id: int | None = None
    config_id: int | None = None

    @classmethod
    def parse(cls, token: str) -> Pick:
        found = _PICK.fullmatch(token.strip())
        if found is None:
            raise NotComparable(f"“{token[:40]}” names no run (r12) or config of an experiment (c3-7).")
        if found[1]:
            return cls(found[0], run_id=int(found[1]))
        return cls(found[0], experiment_id=int(found[2]), config_id=int(found[3]))


@dataclass
class Picked:
    pick: Pick
    label: str
    experiment: Experiment
    config: ServerConfig
    run: Run | None = None
    outputs_differ: bool = False  # the equivalence gate of this config in its experiment
    outputs_match: bool = False  # its outputs were compared there and matched


@dataclass
class PickedComparison:
    picked: list[Picked]
    # The one answer (analysis/verdicts.py) over the picks, the first the reference; None until measured.
    verdicts: analysis.Comparison | None = None
    config_diff: list[ConfigDiffRow] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> tuple[analysis.ComparisonRow, ...]:
        return self.verdicts.rows if self.verdicts else ()

    @property
    def comparison(self) -> list[dict[str, Any]]:
        """The rows as the page's table reads them: each with what settles it."""
        v = self.verdicts
        return [{"row": r, "needs": v.needs(r), "launches": v.launches(r)} for r in self.rows] if v else []

    @property
    def break_even(self) -> dict[str, int | None]:
        return self.verdicts.break_even if self.verdicts else {}

    @property
    def never_pays(self) -> list[str]:
        return self.verdicts.never_pays if self.verdicts else []

    @property
    def reference(self) -> Picked:
        return self.picked[0]

    @property
    def differences(self) -> list[str]:
        """The labels of what differs between the picks (host, experiment, config fields), in table order."""
        # Different picks are different experiments or runs by definition: what matters is everything else.
        skip = ("experiment", "picked", "content_hash")
        return [row.label for row in self.config_diff if row.differs and row.field not in skip]

    @property
    def series_key(self) -> str:
        return self.reference.experiment.profile.series_key

    @property
    def cards(self) -> list[analysis.VerdictCard]:
        """One sentence per pick against the reference: the experiment page's verdict cards over these rows."""
        return self.verdicts.cards if self.verdicts else []

    @property
    def settled_break_even(self) -> dict[str, int]:
        """The break-evens a page may state: where the speedup crosses 1 between two conclusive cells."""
        return self.verdicts.settled_break_even if self.verdicts else {}


def parse_picks(tokens: Sequence[str]) -> list[Pick]:
    picks = list({pick.token: pick for pick in (Pick.parse(token) for token in tokens if token.strip())}.values())
    if len(picks) > MAX_PICKS:
        raise NotComparable(f"Pick at most {MAX_PICKS} runs or configs.")
    return picks


def build_comparison(picks: Sequence[Pick]) -> PickedComparison:
    picked = _load(picks)
    if not picked:
        raise NotComparable("Pick runs or configs to compare: add a run's id, or use “Compare…” on a run or config.")
    shapes = {p.experiment.profile.series_key for p in picked}
    if len(shapes) > 1:
        described = "; ".join(f"{p.label}: {p.experiment.profile.series_label}" for p in picked)
        raise PicksDiffer(
            "These were measured with different request shapes, so their throughputs do not compare: "
            f"{described}. Pick runs or configs whose profiles agree on dataset, lengths, prompts, seed and warm-up."
        )
    result = PickedComparison(picked=picked)
    labels = [p.label for p in picked]
    reference, others = labels[0], labels[1:]
    values = _measurements(picked)
    # The equivalence gate of each pick's config as its own experiment measured it: outputs that parted from the
    # target's at temperature 0 are a bug of that config, whatever it is compared with here.
    result.verdicts = analysis.judge(
        samples.samples(values, label=_label),
        baseline=reference,
        candidates=others,
        passes_per_launch=min(p.experiment.profile.passes for p in picked),
        outputs_differ=[p.label for p in picked[1:] if p.outputs_differ],
        outputs_match=[p.label for p in picked[1:] if p.outputs_match],
        simulated=[p.label for p in picked[1:] if p.config.simulated_accept_length is not None],
        speculative=[p.label for p in picked[1:] if p.config.is_speculative],
        degenerate=samples.degenerate_reasons(values, label=_label),
    )
    result.config_diff = _where_picks_differ(picked) + config_diff_rows([p.config for p in picked])
    usable = [{**v, "run__config__name": v["label"]} for v in samples.usable(values)]
    throughput = points_series(((v["label"], v["concurrency"], v["output_throughput"]) for v in usable), labels)
    if throughput:
        colors = comparison_charts.config_colors(reference, others)
        result.figures["throughput"] = comparison_charts.throughput_figure(
            throughput, baseline=reference, colors=colors
        )
        result.figures["latency"] = comparison_charts.latency_figure(
            latency_table(usable, labels), baseline=reference, colors=colors
        )
        if result.rows:
            # Marked only where the speedup crosses 1 between two conclusive cells (never at an inconclusive one).
            marked = result.settled_break_even
            result.figures["speedup"] = comparison_charts.speedup_figure(result.rows, break_even=marked, colors=colors)
        # Per GPU against per user, as the experiment page draws it: picks on other TP sizes compare per GPU.
        curves = curves_of(usable, {p.label: p.config.gpu_count for p in picked})
        if reference in curves and len(curves) > 1:
            result.figures["frontier"] = deployment_charts.frontier_figure(
                curves, analysis_deployment.pareto_front(curves), baseline=reference, colors=colors
            )
    return result


def _load(picks: Sequence[Pick]) -> list[Picked]:
    run_ids = [p.run_id for p in picks if p.run_id is not None]
    runs = Run.objects.select_related("config", "experiment__profile", "experiment__host").in_bulk(run_ids)
    experiment_ids = [p.experiment_id for p in picks if p.experiment_id is not None]
    experiments = Experiment.objects.select_related("profile", "host").in_bulk(experiment_ids)
    config_ids = [p.config_id for p in picks if p.config_id is not None]
    configs = ServerConfig.objects.in_bulk(config_ids)
    # Whether each picked config belongs to its experiment (its baseline or a candidate): one query.
    member = set(
        Experiment.objects.filter(pk__in=experiment_ids)
        .filter(Q(baseline_id__in=config_ids) | Q(candidate__config_id__in=config_ids))
        .values_list("pk", "baseline_id", "candidate__config_id")
    )
    belongs = {(e, c) for e, base, cand in member for c in (base, cand) if c in config_ids}
    picked: list[Picked] = []
    for pick in picks:
        if pick.run_id is not None:
            run = runs.get(pick.run_id)
            if run is None:
                raise PickNotFound(f"There is no run {pick.run_id}.")
            label = f"run {run.pk} · {run.config.name}"
            picked.append(Picked(pick, label, run.experiment, run.config, run))
        else:
            experiment = experiments.get(pick.experiment_id or 0)
            config = configs.get(pick.config_id or 0)
            if experiment is None or config is None or (experiment.pk, config.pk) not in belongs:
                raise PickNotFound(f"Experiment {pick.experiment_id} has no config {pick.config_id}.")
            picked.append(Picked(pick, f"{config.name} · {experiment.name[:60]}", experiment, config))
    kept = Candidate.objects.filter(experiment_id__in={p.experiment.pk for p in picked}).only(
        "experiment_id", "config_id", "outputs_differ", "equivalence"
    )
    stored = {(c.experiment_id, c.config_id): c for c in kept}
    for p in picked:
        candidate = stored.get((p.experiment.pk, p.config.pk))
        p.outputs_differ = candidate is not None and candidate.outputs_differ
        p.outputs_match = candidate is not None and candidate.outputs_match
    seen: dict[str, int] = {}
    for p in picked:  # two picks may read alike (the same config name in experiments of the same name)
        seen[p.label] = seen.get(p.label, 0) + 1
        if seen[p.label] > 1:
            p.label = f"{p.label} ({seen[p.label]})"
    return picked


def _label(value: Mapping[str, Any]) -> str:
    return value["label"]


def _measurements(picked: Sequence[Picked]) -> list[dict[str, Any]]:
    """Every measurement of a succeeded run of every pick, with the latency columns, each labelled by its pick: a run
    picked alone and also through its config counts for each of those picks."""
    which = Q(pk__in=[])
    for p in picked:
        which |= Q(run_id=p.run.pk) if p.run else Q(run__experiment_id=p.experiment.pk, run__config_id=p.config.pk)
    values = samples.measurement_values(which, *Measurement.LATENCY_FIELDS, succeeded=True)
    by_run = {p.run.pk: p.label for p in picked if p.run}
    by_config = {(p.experiment.pk, p.config.pk): p.label for p in picked if p.run is None}
    out: list[dict[str, Any]] = []
    for m in values:
        labels = [by_run.get(m["run_id"]), by_config.get((m["run__experiment_id"], m["run__config_id"]))]
        out.extend({**m, "label": label} for label in labels if label)
    return out


def _where_picks_differ(picked: Sequence[Picked]) -> list[ConfigDiffRow]:
    """The rows above the config fields: where and in what each pick was measured."""
    rows = []
    for name, label, text in (
        ("experiment", "experiment", lambda p: f"{p.experiment.name} (#{p.experiment.pk})"),
        ("host", "host", lambda p: p.experiment.host.name),
        ("picked", "picked", lambda p: f"run {p.run.pk}, launch {p.run.launch_index + 1}" if p.run else "every run"),
        ("concurrency", "concurrency levels", lambda p: ", ".join(str(c) for c in p.experiment.profile.concurrency)),
    ):
        texts = [text(p) for p in picked]
        rows.append(ConfigDiffRow(name, label, [DiffCell(t, i > 0 and t != texts[0]) for i, t in enumerate(texts)]))
    return rows
