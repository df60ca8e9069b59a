"""Importing runs measured outside specdash (bench_serving, vllm bench serve) into an experiment, all or nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from ..analysis import slo
from ..formats.imported_results import ImportedRun
from ..models import AuditEvent, BenchmarkProfile, Candidate, Experiment, Host, Measurement, Run, ServerConfig
from .audit import Actor, record_event
from .configs import do_create_config, do_create_profile

NAME_MAX = 128  # ServerConfig.name


@dataclass(frozen=True)
class ImportedFile:
    name: str
    format: str
    runs: list[ImportedRun]


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
) -> tuple[Experiment, list[Run]]:
    """File every run of the (parsed, valid) files as a succeeded, imported run with its measurements: into
    `experiment`, or a new one on `host` whose baseline is the first run without speculation (the first run when all
    speculate) and whose candidates are the other servers. `configs`: each server's config (`Server.key`), unsaved
    and valid on the experiment's host (forms.hosted_configs.imported_configs); each is found by content hash or
    created. Nothing is queued, so no worker ever takes an imported run."""
    pairs = [(file, run) for file in files for run in file.runs]
    saved = _configs_of(actor, configs, [run.server.key for _, run in pairs])
    if experiment is None:
        assert host is not None, "a new experiment needs a host"
        experiment = _new_experiment(actor, name or _default_name(files), host, saved, pairs, objective)
    else:
        _add_candidates(experiment, saved)
    last = experiment.run_set.aggregate(sequence=Max("sequence"), launch=Max("launch_index"))
    first_sequence = 0 if last["sequence"] is None else last["sequence"] + 1
    launch = 0 if last["launch"] is None else last["launch"] + 1
    now = timezone.now()
    runs = Run.objects.bulk_create(
        Run(
            experiment=experiment,
            config=saved[run.server.key],
            host_id=experiment.host_id,
            sequence=first_sequence + i,
            launch_index=launch,
            state=Run.State.SUCCEEDED,
            timeline=[{"state": Run.State.SUCCEEDED, "at": now.isoformat()}],
            created_at=now,
            finished_at=now,
            effective_args=run.server_args,
            launch_command=run.command,
            imported_from={
                "file": file.name,
                "format": file.format,
                "tool": run.tool,
                "version": run.version,
                "command": run.command,
                "lines": [cell.line for cell in run.cells],
            },
        )
        for i, (file, run) in enumerate(pairs)
    )
    Measurement.objects.bulk_create(
        measurement for row, (_, run) in zip(runs, pairs, strict=True) for measurement in _measurements(row, run)
    )
    record_event(actor, AuditEvent.Action.IMPORT, experiment, files=[f.name for f in files], runs=[r.pk for r in runs])
    return experiment, runs


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
    ordered = list(dict.fromkeys(configs.values()))
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
    label = f"imported: {first.dataset} {first.input_len} in / {first.output_len} out, {first.num_prompts} prompts"
    profile = BenchmarkProfile.objects.filter(name=label[:128], **shape).order_by("-created_at").first()
    profile = profile or do_create_profile(actor, BenchmarkProfile(name=label[:128], **shape))
    experiment = Experiment.objects.create(
        name=name[:200], host=host, baseline=baseline, profile=profile, created_by=actor.user
    )
    Candidate.objects.bulk_create(
        Candidate(experiment=experiment, config=config, position=i)
        for i, config in enumerate(c for c in ordered if c != baseline)
    )
    return experiment


def _add_candidates(experiment: Experiment, configs: dict[tuple, ServerConfig]) -> None:
    """Configs new to an existing experiment join it as candidates, after those it has."""
    known = {experiment.baseline_id, *experiment.candidate_set.values_list("config_id", flat=True)}
    position = (experiment.candidate_set.aggregate(last=Max("position"))["last"] or -1) + 1
    for config in dict.fromkeys(configs.values()):
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
    names = ", ".join(f.name for f in files)
    return f"imported: {names}"
