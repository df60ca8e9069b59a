"""Importing runs measured outside specdash (bench_serving, vllm bench serve, ...) into experiments, all or nothing.

Each request shape (dataset, input and output lengths, prompts) is its own profile, so a new import makes one
experiment per shape; each run is placed in history at the time it was measured (the file's own date, else the
time its importer gives, as an archive member's mtime), and the history checks run over it as over a measured run;
a file imported before (the same bytes, by SHA-256) is skipped and changes nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..analysis import slo
from ..formats.imported_results import ImportedFile, ImportedRun
from ..models import AuditEvent, BenchmarkProfile, Candidate, Experiment, Host, Measurement, Run, ServerConfig
from .audit import Actor, record_event
from .configs import do_create_config, do_create_profile
from .confirmations import do_check_history

NAME_MAX = 128  # ServerConfig.name
EXPERIMENT_NAME_MAX = 200  # Experiment.name


@dataclass(frozen=True)
class Skipped:
    """A file imported before: its runs as they are."""

    name: str
    sha256: str
    runs: list[Run]


@dataclass
class ImportOutcome:
    experiments: list[Experiment] = field(default_factory=list)  # one per request shape, or the one imported into
    runs: list[Run] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def already_imported(files: Sequence[ImportedFile]) -> dict[str, list[Run]]:
    """The runs of the files imported before, by their SHA-256 (one query)."""
    hashes = {f.sha256 for f in files if f.sha256}
    found: dict[str, list[Run]] = {}
    for run in Run.objects.filter(imported_sha256__in=hashes).select_related("experiment").order_by("pk"):
        found.setdefault(run.imported_sha256, []).append(run)
    return found


@transaction.atomic
def do_import_runs(
    *,
    actor: Actor,
    files: Sequence[ImportedFile],
    configs: Mapping[tuple, ServerConfig],
    experiment: Experiment | None = None,
    name: str = "",
    host: Host | None = None,
    objective: slo.Slo | None = None,
) -> ImportOutcome:
    """File every run of the (parsed, valid) files as a succeeded, imported run with its measurements: into
    `experiment` (whose profile's shape every run has: forms.imports.shape_refusals checks it), or new ones on
    `host`, one per request shape, each with its shape's profile, whose baseline is the first run without
    speculation (the first run when all speculate) and whose candidates are the other servers. `configs`: each
    server's config (`Server.key`), unsaved and valid on the experiment's host (forms.hosted_configs.
    imported_configs); each is found by content hash or created. A file imported before (its `sha256`) is skipped.
    Nothing is queued for an imported run; the history checks of its series may queue a confirming launch, as after
    a measured run."""
    outcome = ImportOutcome()
    before = already_imported(files)
    fresh: list[ImportedFile] = []
    for file in files:
        if file.sha256 in before:
            outcome.skipped.append(Skipped(file.name, file.sha256, before[file.sha256]))
        elif file.sha256 not in {f.sha256 for f in fresh} or not file.sha256:
            fresh.append(file)  # the same bytes twice in one import: the first
    pairs = [(file, run) for file in fresh for run in file.runs]
    if not pairs:
        return outcome
    saved = _configs_of(actor, configs, [run.server.key for _, run in pairs])
    now = timezone.now()
    by_shape: dict[tuple, list[tuple[ImportedFile, ImportedRun]]] = {}
    for pair in pairs:
        by_shape.setdefault(pair[1].shape, []).append(pair)
    for group in by_shape.values():
        if experiment is None:
            assert host is not None, "a new experiment needs a host"
            label = name or _default_name(fresh)
            if len(by_shape) > 1:
                label = f"{label[: EXPERIMENT_NAME_MAX - 60]} · {_shape_label(group[0][1])}"
            target = _new_experiment(actor, label, host, saved, group, objective)
        else:
            target = experiment
            _add_candidates(target, saved, group)
        outcome.experiments.append(target)
        outcome.runs += _file_runs(target, saved, group, now)
    record_event(
        actor,
        AuditEvent.Action.IMPORT,
        outcome.experiments[0],
        files=[f.name for f in fresh],
        runs=[r.pk for r in outcome.runs],
        experiments=[e.pk for e in outcome.experiments],
        skipped=[s.name for s in outcome.skipped],
    )
    # The history of each series in the order it was measured: an older night is checked before a newer one.
    for run in sorted(outcome.runs, key=lambda r: (r.finished_at or now, r.pk)):
        do_check_history(run)
    return outcome


def _file_runs(
    experiment: Experiment, saved: dict[tuple, ServerConfig], group: list[tuple[ImportedFile, ImportedRun]], now
) -> list[Run]:
    """The runs of one experiment's group, in the order they were measured (their sequence follows history)."""
    timed = sorted(((_measured_at(file, run, now), file, run) for file, run in group), key=lambda t: t[0])
    last = experiment.run_set.aggregate(sequence=Max("sequence"), launch=Max("launch_index"))
    first_sequence = 0 if last["sequence"] is None else last["sequence"] + 1
    launch = 0 if last["launch"] is None else last["launch"] + 1
    runs = Run.objects.bulk_create(
        Run(
            experiment=experiment,
            config=saved[run.server.key],
            host_id=experiment.host_id,
            sequence=first_sequence + i,
            launch_index=launch,
            state=Run.State.SUCCEEDED,
            timeline=[{"state": Run.State.SUCCEEDED, "at": at.isoformat()}],
            created_at=at,
            finished_at=at,
            effective_args=run.server_args,
            launch_command=run.command,
            imported_sha256=file.sha256,
            imported_from={
                "file": file.name,
                "format": file.format,
                "tool": run.tool,
                "version": run.version,
                "engine": run.engine,
                "command": run.command,
                "lines": [cell.line for cell in run.cells],
                "measured_at": at.isoformat(),
                # What the importer stated rather than the file (common.GIVEN's names).
                "given": sorted(run.server.given),
                "sha256": file.sha256,
            },
        )
        for i, (at, file, run) in enumerate(timed)
    )
    Measurement.objects.bulk_create(
        measurement for row, (_, _, run) in zip(runs, timed, strict=True) for measurement in _measurements(row, run)
    )
    return runs


def _measured_at(file: ImportedFile, run: ImportedRun, now: datetime) -> datetime:
    """The run's own date where its file says one, else the importer's time for the file, else now; never later
    than now (a clock ahead would put a night after every run still to come)."""
    stated = parse_datetime(run.measured_at) if run.measured_at else None
    at = stated or file.measured_at or now
    if timezone.is_naive(at):
        at = at.replace(tzinfo=UTC)
    return min(at, now)


def _configs_of(
    actor: Actor, checked: Mapping[tuple, ServerConfig], keys: Sequence[tuple]
) -> dict[tuple, ServerConfig]:
    """Each server's config: the stored one with the same content (under any name), else the checked one saved."""
    found: dict[tuple, ServerConfig] = {}
    for key in keys:
        if key in found:
            continue
        config = checked[key]
        stored = ServerConfig.objects.with_hash(config.compute_hash()).first()
        if stored is None and any(c.name == config.name for c in found.values()):
            config.name = f"{config.name[: NAME_MAX - 11]} {config.compute_hash()[:10]}"
        found[key] = stored or do_create_config(actor, config)
    return found


def _new_experiment(
    actor: Actor,
    name: str,
    host: Host,
    configs: dict[tuple, ServerConfig],
    pairs: list[tuple[ImportedFile, ImportedRun]],
    objective: slo.Slo | None,
) -> Experiment:
    ordered = list(dict.fromkeys(configs[run.server.key] for _, run in pairs))
    baseline = next((c for c in ordered if not c.is_speculative), ordered[0])
    first = pairs[0][1]
    passes = max(Counter(cell.concurrency for cell in run.cells).most_common(1)[0][1] for _, run in pairs)
    shape = {
        "dataset": first.dataset,
        "input_len": first.input_len,
        "output_len": first.output_len,
        "num_prompts": first.num_prompts,
        "concurrency": sorted({cell.concurrency for _, run in pairs for cell in run.cells}),
        "passes": passes,
        "launches": 1,
        "prompt_set": None,
        # The SLO the cells are judged under (goodput from their request rows), or none.
        "slo_metric": objective.metric if objective else "",
        "slo_percentile": objective.percentile if objective else "",
        "slo_limit_ms": objective.limit_ms if objective else None,
    }
    label = f"imported: {_shape_label(first)}"
    profile = BenchmarkProfile.objects.filter(name=label[:128], **shape).order_by("-created_at").first()
    profile = profile or do_create_profile(actor, BenchmarkProfile(name=label[:128], **shape))
    experiment = Experiment.objects.create(
        name=name[:EXPERIMENT_NAME_MAX], host=host, baseline=baseline, profile=profile, created_by=actor.user
    )
    Candidate.objects.bulk_create(
        Candidate(experiment=experiment, config=config, position=i)
        for i, config in enumerate(c for c in ordered if c != baseline)
    )
    return experiment


def _shape_label(run: ImportedRun) -> str:
    return f"{run.dataset} {run.input_len} in / {run.output_len} out, {run.num_prompts} prompts"


def _add_candidates(
    experiment: Experiment, configs: dict[tuple, ServerConfig], pairs: list[tuple[ImportedFile, ImportedRun]]
) -> None:
    """Configs new to an existing experiment join it as candidates, after those it has."""
    known = {experiment.baseline_id, *experiment.candidate_set.values_list("config_id", flat=True)}
    position = (experiment.candidate_set.aggregate(last=Max("position"))["last"] or -1) + 1
    for config in dict.fromkeys(configs[run.server.key] for _, run in pairs):
        if config.pk not in known:
            Candidate.objects.create(experiment=experiment, config=config, position=position)
            known.add(config.pk)
            position += 1


def _measurements(run: Run, imported: ImportedRun) -> list[Measurement]:
    passes: Counter[int] = Counter()
    out = []
    for cell in imported.cells:
        metrics = dict(cell.metrics)
        out.append(
            Measurement(
                run=run,
                pass_index=passes[cell.concurrency],
                concurrency=cell.concurrency,
                completed=metrics.pop("completed"),
                failed=metrics.pop("failed", None) or 0,
                input_throughput=metrics.pop("input_throughput", None) or 0,
                raw={"imported": True, "line": cell.line, **cell.raw},
                **metrics,
            )
        )
        passes[cell.concurrency] += 1
    return out


def _default_name(files: Sequence[ImportedFile]) -> str:
    names = ", ".join(f.name for f in files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return f"imported: {names}"
