"""The review of history: the flags queue and its CSV, a flag with its series, a series page, pinning a baseline."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from experiments.charts.history import HistoryEntry, history_figure
from experiments.reads import environments, profile_traces, series
from experiments.serializers.exports import flags_csv_response

from ..actions.audit import Actor
from ..actions.review import do_pin_baseline, do_triage_flag, do_triage_flags
from ..forms import FlagBulkTriageForm, FlagTriageForm, RerunForm
from ..models import (
    BenchmarkProfile,
    Flag,
    FlagSeries,
    Host,
    PinnedBaseline,
    Run,
    ServerConfig,
    SuspectSeries,
    Suspicion,
)
from .access import requires
from .paging import PageLinks

FLAGS_PAGE = 50


@requires("experiments.view_flag")
def flag_list(request: HttpRequest) -> HttpResponse:
    """The review queue; members triage from it, a row at a time or the ticked flags at once."""
    state = request.GET.get("state", "open")
    states = ["open", *Flag.Triage.values, "all"]
    form = FlagBulkTriageForm()
    if request.method == "POST":
        if not request.user.has_perm("experiments.change_flag"):
            raise PermissionDenied("Triage takes a member's role.")
        form = FlagBulkTriageForm(_triage_data(request))
        if form.is_valid():
            count = do_triage_flags(form.cleaned_data["flags"], actor=Actor.of(request), **_bulk_fields(form))
            messages.success(request, f"{count} flag{'s' if count != 1 else ''} marked {form.cleaned_data['triage']}.")
            return redirect(f"{reverse('flag_list')}?state={state if state in states else 'open'}")
    # Pages as the experiments table has them: a year of flags is thousands of rows, each with its triage select.
    page = Paginator(_flags_in_state(state), FLAGS_PAGE).get_page(request.GET.get("page"))
    context = {
        "flags": page.object_list,
        "page": page,
        "page_links": PageLinks({"state": state}),
        "state": state,
        "states": states,
        "form": form,
        "triage_choices": Flag.Triage.choices,
    }
    return render(request, "experiments/flag_list.html", context, status=400 if form.errors else 200)


def _triage_data(request: HttpRequest):
    """A row's own Save button triages that flag with the row's choice; the bulk button, the ticked ones."""
    row = request.POST.get("row", "")
    if row.isdigit():
        return {"flags": [row], "triage": request.POST.get(f"triage-{row}", ""), "comment": ""}
    return request.POST


def _bulk_fields(form: FlagBulkTriageForm) -> dict:
    data = form.cleaned_data
    return {"triage": data["triage"], "assign_to_me": data["assign_to_me"], "comment": data["comment"]}


@requires("experiments.view_flag")
def flag_export_csv(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "all")
    return flags_csv_response(_flags_in_state(state).iterator(), state=state)


def _flags_in_state(state: str):
    # Ordered here: a GROUP BY query (the Count) drops Meta.ordering, and pages need a stable order.
    flags = (
        Flag.objects.select_related("host", "config", "assignee", "run__experiment")
        .annotate(series_count=Count("series"))
        .order_by("-created_at", "-id")
    )
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
    held = flag.series.select_related("config", "change_run", "last_before_run", "confirmed_by")
    before = environments.last_run_before(flag.run)
    context = {
        "flag": flag,
        "held": held,
        "suspicions": flag.suspicions.select_related("run").prefetch_related("series", "confirming_runs__config"),
        "form": form,
        "comments": flag.flagcomment_set.select_related("author"),
        "rerun_form": RerunForm(),
        "can_rerun": flag.run.experiment.can_be_managed_by(request.user),
        # What changed on the machine between the last run before the change and the flag's first run after it.
        "environment_diff": environments.diff_runs(before, flag.run) if before is not None else None,
        **_profile_beside(request, before, flag.run),
    }
    return render(request, "experiments/flag_detail.html", context)


def _profile_beside(request: HttpRequest, before: Run | None, after: Run) -> dict:
    """The breakdown diff of the run before the change and the flag's run when both were profiled; else which of
    the two a member may still profile (the run page's Profile this run)."""
    sides = [run for run in (before, after) if run is not None]
    profiled = profile_traces.profiled_run_ids([run.pk for run in sides])
    both = before is not None and {before.pk, after.pk} <= profiled
    may_profile = request.user.has_perm("experiments.add_experiment")
    return {
        "profile_diff": profile_traces.run_diff(before, after) if both and before is not None else None,
        "profile_both": both,
        "to_profile": [run for run in sides if run.pk not in profiled and run.is_finished] if may_profile else [],
    }


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
        "suspicions": Suspicion.objects.of_series(host, config_hash, profile_key)
        .select_related("run", "flag")
        .prefetch_related("series", "confirming_runs__config")[:50],
    }
    return render(request, "experiments/series_detail.html", context)


@requires("experiments.view_flag")
def series_figure(request: HttpRequest, host_id: int, config_hash: str, profile_key: str) -> HttpResponse:
    """The history figure as JSON, fetched by the page once it is shown: a long history (10,000 runs is a 2 MB
    figure) then never holds up the page's first paint."""
    host = get_object_or_404(Host, pk=host_id)
    config = ServerConfig.objects.with_hash(config_hash).first()
    if config is None:
        raise Http404("No config has this content hash.")
    title = f"{config.name} on {host.name}"
    figure = _series_figure(host, config_hash, profile_key, title, speculative=config.is_speculative)
    return JsonResponse(figure, json_dumps_params={"allow_nan": False})


RUN_ID_SLOT = 987654321  # stands in for a run id while the address of every point is made from one reverse()


def _series_figure(host: Host, config_hash: str, profile_key: str, title: str, *, speculative: bool = False) -> dict:
    """Every concurrency of the series on a time axis, each point linked to its run, with its flags, suspicions
    and pinned baseline marked; a speculative config's accept length below its throughput (four queries, five
    with acceptance)."""
    held = FlagSeries.objects.filter(
        flag__host=host, flag__profile_key=profile_key, config_hash=config_hash
    ).select_related("flag")
    suspected = SuspectSeries.objects.filter(
        suspicion__host=host, suspicion__profile_key=profile_key, suspicion__config_hash=config_hash
    ).select_related("suspicion")
    run_url = reverse("run_detail", args=[RUN_ID_SLOT]).replace(str(RUN_ID_SLOT), "{}")
    metrics = [Flag.Metric.THROUGHPUT, *([Flag.Metric.ACCEPTANCE] if speculative else [])]
    points: dict[str, dict[int, list[HistoryEntry]]] = {metric: {} for metric in metrics}
    marks: dict[str, list[tuple[int, int, str, str]]] = {metric: [] for metric in metrics}
    for metric in metrics:
        levels = series.series_by_level(host.pk, config_hash, profile_key, metric=metric)
        for level, level_points in levels.items():
            points[metric][level] = [
                HistoryEntry(
                    p.finished_at.isoformat() if p.finished_at else "",
                    f"run {p.run_id} (experiment {p.experiment_id})",
                    p.value,
                    run_url.format(p.run_id),
                )
                for p in level_points
            ]
            index_of = {p.run_id: i for i, p in enumerate(level_points)}
            for s in held:
                if (s.flag.metric, s.concurrency, s.category) == (metric, level, "") and s.change_run_id in index_of:
                    text = f"{s.change:+.1%}: {s.flag.message}"
                    marks[metric].append((level, index_of[s.change_run_id], s.flag.direction, text))
            for row in suspected:
                if (row.metric, row.concurrency, row.category) == (metric, level, "") and row.change_run_id in index_of:
                    text = f"suspected {row.change:+.1%} ({row.get_state_display()})"
                    marks[metric].append((level, index_of[row.change_run_id], "suspected", text))
    pinned = PinnedBaseline.objects.of_series(host, profile_key).select_related("config", "pinned_by").first()
    pinned_mark = None
    if pinned is not None and pinned.config.content_hash == config_hash:
        by = f" by {pinned.pinned_by.get_username()}" if pinned.pinned_by else ""
        pinned_mark = (pinned.pinned_at.isoformat(), f"pinned as the baseline{by}")
    return history_figure(
        points[Flag.Metric.THROUGHPUT],
        marks[Flag.Metric.THROUGHPUT],
        title=title,
        pinned=pinned_mark,
        acceptance=points.get(Flag.Metric.ACCEPTANCE),
        acceptance_flags=marks.get(Flag.Metric.ACCEPTANCE, []),
    )


@requires("experiments.add_pinnedbaseline")
@require_POST
def pin_baseline(request: HttpRequest, host_id: int, config_hash: str, profile_key: str) -> HttpResponse:
    host = get_object_or_404(Host, pk=host_id)
    config = get_object_or_404(ServerConfig.objects.with_hash(config_hash)[:1])
    profile = get_object_or_404(BenchmarkProfile.objects.in_series(profile_key)[:1])
    do_pin_baseline(host=host, profile=profile, config=config, actor=Actor.of(request))
    messages.success(request, f"{config.name} is now the pinned baseline on {host.name} for {profile.series_label}.")
    return redirect(reverse("series_detail", args=[host.pk, config_hash, profile_key]))
