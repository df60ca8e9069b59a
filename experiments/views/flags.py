"""The review of history: the flags queue and its CSV, a flag with its series, a series page, pinning a baseline."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from .. import series
from ..actions.audit import Actor
from ..actions.review import do_pin_baseline, do_triage_flag
from ..charts import history_figure
from ..exports import flags_csv_response
from ..forms import FlagTriageForm, RerunForm
from ..models import BenchmarkProfile, Flag, Host, PinnedBaseline, Run, ServerConfig
from .access import requires


@requires("experiments.view_flag")
def flag_list(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "open")
    states = ["open", *Flag.Triage.values, "all"]
    context = {"flags": _flags_in_state(state)[:500], "state": state, "states": states}
    return render(request, "experiments/flag_list.html", context)


@requires("experiments.view_flag")
def flag_export_csv(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "all")
    return flags_csv_response(_flags_in_state(state).iterator(), state=state)


def _flags_in_state(state: str):
    flags = Flag.objects.select_related("host", "config", "assignee", "run__experiment")
    if state == "open":
        return flags.filter(triage__in=Flag.OPEN_STATES)
    if state in Flag.Triage.values:
        return flags.filter(triage=state)
    return flags


@requires("experiments.view_flag")
def flag_detail(request: HttpRequest, flag_id: int) -> HttpResponse:
    flag = get_object_or_404(Flag.objects.select_related("host", "config", "assignee", "run__experiment"), pk=flag_id)
    if request.method == "POST":
        if not request.user.has_perm("experiments.change_flag"):
            raise PermissionDenied("Triage takes a member's role.")
        form = FlagTriageForm(request.POST)
        if form.is_valid():
            do_triage_flag(flag, actor=Actor.of(request), **form.cleaned_data)
            messages.success(request, "Flag updated.")
            return redirect(flag)
    else:
        form = FlagTriageForm(initial={"triage": flag.triage, "assignee": flag.assignee})
    figure = _series_figure(flag.host, flag.config_hash, flag.profile_key, f"{flag.config.name} on {flag.host.name}")
    context = {
        "flag": flag,
        "form": form,
        "comments": flag.flagcomment_set.select_related("author"),
        "figure": figure,
        "rerun_form": RerunForm(),
        "can_rerun": flag.run.experiment.can_be_managed_by(request.user),
    }
    return render(request, "experiments/flag_detail.html", context)


@requires("experiments.view_flag")
def series_detail(request: HttpRequest, host_id: int, config_hash: str, profile_key: str) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_id)
    config = ServerConfig.objects.with_hash(config_hash).first()
    profile = BenchmarkProfile.objects.in_series(profile_key).first()
    if config is None or profile is None:
        return render(request, "experiments/series_detail.html", {"missing": True}, status=404)
    pinned = PinnedBaseline.objects.of_series(host, profile_key).first()
    context = {
        "host": host,
        "config": config,
        "profile": profile,
        "pinned": pinned,
        "is_pinned": pinned is not None and pinned.config.content_hash == config_hash,
        "flags": Flag.objects.of_series(host, config_hash, profile_key),
        "figure": _series_figure(host, config_hash, profile_key, f"{config.name} on {host.name}"),
    }
    return render(request, "experiments/series_detail.html", context)


def _series_figure(host: Host, config_hash: str, profile_key: str, title: str) -> dict:
    """Every concurrency of the series, run after run, with its flags marked (two queries, then one per level)."""
    flags = Flag.objects.of_series(host, config_hash, profile_key)
    levels = sorted(
        set(
            Run.objects.filter(
                host=host, config__content_hash=config_hash, experiment__profile__series_key=profile_key
            ).values_list("measurement__concurrency", flat=True)
        )
        - {None}
    )
    points: dict[int, list[tuple[str, float]]] = {}
    marks: list[tuple[int, int, str, str]] = []
    for level in levels:
        key = series.SeriesKey(host.pk, config_hash, profile_key, level)
        level_points = series.series_points(key)
        points[level] = [(f"run {p.run_id} (experiment {p.experiment_id})", p.value) for p in level_points]
        index_of = {p.run_id: i for i, p in enumerate(level_points)}
        for flag in flags:
            if flag.concurrency == level and flag.run_id in index_of:
                marks.append((level, index_of[flag.run_id], flag.direction, f"{flag.change:+.1%}: {flag.message}"))
    return history_figure(points, marks, title=title)


@requires("experiments.add_pinnedbaseline")
@require_POST
def pin_baseline(request: HttpRequest, host_id: int, config_hash: str, profile_key: str) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_id)
    config = get_object_or_404(ServerConfig.objects.with_hash(config_hash)[:1])
    profile = get_object_or_404(BenchmarkProfile.objects.in_series(profile_key)[:1])
    do_pin_baseline(host=host, profile=profile, config=config, actor=Actor.of(request))
    messages.success(request, f"{config.name} is now the pinned baseline on {host.name} for {profile.series_label}.")
    return redirect(reverse("series_detail", args=[host.pk, config_hash, profile_key]))
