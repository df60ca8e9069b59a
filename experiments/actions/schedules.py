"""Building an adaptive speculation schedule from a finished study's (or an experiment's) per-band winners, and
queueing the experiment that verifies it: the adaptive server against each band's static winner and the baseline,
interleaved, at every concurrency of the source.

The schedule's JSON comes from `analysis.adaptive_schedule` (numbers of the winners' saved configs, nothing a
user typed); the adaptive server is a new `ServerConfig` of the winners' server settings that points at it, so the
worker ships the file and passes `--speculative-adaptive --speculative-adaptive-config <file>`
(workers/run/adaptive.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils.timesince import timesince

from ..analysis import comparison
from ..analysis.adaptive_schedule import BandWinner, build_adaptive_schedule
from ..models import AdaptiveSchedule, AuditEvent, BenchmarkProfile, Experiment, Host, ServerConfig, Study
from ..reads.reports import build_report
from ..rules import config_names, launch_fields, server_flags
from ..tuning import plan, recommend
from .audit import Actor, record_event
from .experiments import do_create_experiment

# The verification: two interleaved launches of each config, each measuring every concurrency at least twice, so each
# (config, concurrency) has four samples or more: on 2 + 2 the Welch interval's t quantile (df 1-2) makes any
# interval too wide to say "within 2%". Passes are cheaper than launches; the passes of one launch share its state,
# so the interval is a little optimistic about launch-to-launch variation (analysis/comparison.py).
VERIFY_LAUNCHES = 2
VERIFY_PASSES = 2
NAME_LENGTH = ServerConfig._meta.get_field("name").max_length or 128
ADAPTIVE_FLAGS = ("--speculative-adaptive", "--speculative-adaptive-config")  # SGLang 0.5.23 and later


class ScheduleRefused(Exception):
    """No schedule can be built from this source; the message says why (shown as it is on the page and the API)."""


def study_bands(study: Study) -> list[tuple[BandWinner, ServerConfig]]:
    """The finished study's recommendation as band winners, each with its saved config (the baseline for "no
    speculation")."""
    if study.is_running or not study.recommendation:
        raise ScheduleRefused("The study has not finished: a schedule is built from its recommendation.")
    configs = {c.name: c.config for c in study.studyconfig_set.select_related("config")}
    bands = [recommend.Band(int(b["low"]), int(b["high"]), str(b["config"]), []) for b in study.recommendation]
    winners = recommend.band_winners(bands, study.search_space())
    return [(w, study.baseline if w.config == plan.BASELINE else configs[w.config]) for w in winners]


def experiment_bands(experiment: Experiment) -> list[tuple[BandWinner, ServerConfig]]:
    """Per concurrency the fastest candidate the comparison calls faster (else the baseline), merged into bands."""
    candidates = experiment.ordered_candidates()
    levels = sorted({int(c) for c in experiment.profile.concurrency})
    if len(candidates) < 2 or len(levels) < 2:
        raise ScheduleRefused(
            "A schedule needs at least two candidates and two concurrencies to choose between "
            f"(this experiment has {len(candidates)} candidate(s) at {len(levels)} concurrency level(s))."
        )
    rows = build_report(experiment, with_figures=False).rows
    best = []
    for level in levels:
        faster = [r for r in rows if r.concurrency == level and r.verdict == comparison.FASTER]
        row = max(faster, key=lambda r: r.speedup) if faster else None
        name = row.candidate if row else plan.BASELINE
        best.append(recommend.Best(level, name, row.speedup if row else None, None, None, 0))
    if all(b.config == plan.BASELINE for b in best):
        raise ScheduleRefused("No candidate is faster than the baseline at any concurrency: serve the baseline.")
    by_name = {c.name: c for c in candidates}
    out = []
    for band in recommend.bands(best):
        config = experiment.baseline if band.config == plan.BASELINE else by_name[band.config]
        out.append((_winner(band, config), config))
    return out


def _winner(band: recommend.Band, config: ServerConfig) -> BandWinner:
    if not config.is_speculative or band.config == plan.BASELINE:
        return BandWinner(band.low, band.high, band.config)
    env = config.env or {}
    settings = (*[str(a) for a in config.extra_args or []], *(f"{k}={env[k]}" for k in sorted(env)))
    return BandWinner(
        band.low,
        band.high,
        band.config,
        config.speculative_algorithm,
        config.speculative_num_steps,
        config.speculative_eagle_topk,
        config.speculative_draft_model_path,
        tuple(settings),
    )


@transaction.atomic
def do_build_study_schedule(study: Study, *, actor: Actor) -> AdaptiveSchedule:
    """The next schedule version of a finished study, and its verification experiment (queued)."""
    study = Study.objects.select_for_update(of=("self",)).select_related("host", "profile", "baseline").get(pk=study.pk)
    return _build(
        actor, study_bands(study), host=study.host, baseline=study.baseline, profile=study.profile,
        tolerance=study.tolerance, source={"study": study},
    )  # fmt: skip


@transaction.atomic
def do_build_experiment_schedule(experiment: Experiment, *, actor: Actor) -> AdaptiveSchedule:
    """The next schedule version of an experiment with several candidates and concurrencies, and its verification."""
    experiment = (
        Experiment.objects.select_for_update(of=("self",))
        .select_related("host", "profile", "baseline")
        .get(pk=experiment.pk)
    )
    return _build(
        actor, experiment_bands(experiment), host=experiment.host, baseline=experiment.baseline,
        profile=experiment.profile, tolerance=0.02, source={"experiment": experiment},
    )  # fmt: skip


def _build(
    actor: Actor,
    bands: Sequence[tuple[BandWinner, ServerConfig]],
    *,
    host: Host,
    baseline: ServerConfig,
    profile: BenchmarkProfile,
    tolerance: float,
    source: dict[str, Any],
) -> AdaptiveSchedule:
    engines = {config.engine for winner, config in bands if winner.speculates}
    if engines - {launch_fields.SGLANG}:
        raise ScheduleRefused(
            "An adaptive server is SGLang's (--speculative-adaptive), and this answer's winners run on "
            f"{', '.join(sorted(launch_fields.label(e) for e in engines))}. A schedule built from SGLang winners can "
            "be downloaded as vLLM 0.33+ takes it (a K per batch size); one built from vLLM winners is not yet."
        )
    built = build_adaptive_schedule([winner for winner, _ in bands])
    if built.config is None:
        raise ScheduleRefused(" ".join(built.notes))
    refusal = schedule_refusal(host)
    if refusal is not None:
        raise ScheduleRefused(refusal)
    # The source's row is locked by the caller, so two presses never take one version number.
    version = (AdaptiveSchedule.objects.filter(**source).aggregate(last=Max("version"))["last"] or 0) + 1
    schedule = AdaptiveSchedule.objects.create(
        **source,
        version=version,
        config_json=built.to_json(),
        notes=built.notes,
        bands=[
            {"low": w.low, "high": w.high, "config": w.config, "config_id": c.pk, "steps": _steps(built, w)}
            for w, c in bands
        ],
        tolerance=tolerance,
        created_by=actor.user if actor.user is not None and actor.user.is_authenticated else None,
    )
    server = next(
        c for w, c in bands
        if w.speculates and (w.algorithm, w.draft_model_path) == (built.algorithm, built.draft_model_path)
    )  # fmt: skip
    adaptive = _adaptive_config(schedule, server, built.initial_steps or 1)
    statics = list({c.pk: c for w, c in bands if c.pk != baseline.pk}.values())
    copy = BenchmarkProfile.objects.get(pk=profile.pk)  # a copy: the source's own stays as it is
    copy.pk, copy.launches, copy.name = None, VERIFY_LAUNCHES, f"{schedule}"[:100] + " verification"
    copy.passes = max(copy.passes, VERIFY_PASSES)
    schedule.verification = do_create_experiment(
        actor=actor,
        name=f"{schedule} · verify"[:200],
        host=host,
        baseline=baseline,
        candidates=[adaptive, *statics],
        profile=copy,
    )
    schedule.save(update_fields=["verification"])
    record_event(
        actor, AuditEvent.Action.SCHEDULE_BUILD, schedule, version=version, digest=schedule.digest,
        verification=schedule.verification.pk, bands=len(bands), notes=len(built.notes),
    )  # fmt: skip
    return schedule


def schedule_refusal(host: Host) -> str | None:
    """Why the host's SGLang cannot serve an adaptive server (the flags its listing lacks, with its version), or None:
    the pages show this beside a disabled "Build a schedule", and building refuses with it. A host whose flags were
    never read is not refused: nothing is known against it."""
    known = host.known_server_flags()  # the host's SGLang as last read, when read with its launcher
    missing = [f for f in ADAPTIVE_FLAGS if known is not None and f not in known]
    if not missing:
        return None
    when = f"{timesince(host.server_flags_at)} ago" if host.server_flags_at else "before"
    return server_flags.refusal(missing, host.name, host.listed_sglang_version, when)


def _steps(built: Any, winner: BandWinner) -> int:
    return int(built.config[str(winner.low)]["candidate_steps"][0])


def _adaptive_config(schedule: AdaptiveSchedule, server: ServerConfig, initial_steps: int) -> ServerConfig:
    """The adaptive server: the server winner's launch at topk 1, starting at its steps (SGLang requires them among
    the candidates, and sets the draft tokens to steps + 1), its steps moved by the schedule."""
    expect = dict(server.expect or {})
    if isinstance(expect.get("server_args"), dict):  # the winner's static speculative args no longer hold
        expect["server_args"] = {k: v for k, v in expect["server_args"].items() if not k.startswith("speculative_")}
    return ServerConfig(
        name=config_names.free_name(f"adaptive v{schedule.version}", {server.name}, NAME_LENGTH),
        model_path=server.model_path,
        served_model_name=server.served_model_name,
        speculative_algorithm=server.speculative_algorithm,
        speculative_draft_model_path=server.speculative_draft_model_path,
        speculative_num_steps=initial_steps,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=initial_steps + 1,
        tp_size=server.tp_size,
        extra_args=[a for a in server.extra_args or [] if a != "--speculative-adaptive"],
        env=dict(server.env or {}),
        expect=expect,
        log_metrics=dict(server.log_metrics or {}),
        adaptive_schedule=schedule,
    )
