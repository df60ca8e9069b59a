"""The import page: result files (or an archive of them) into experiments, as `POST /api/imports` takes them."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from ..actions.audit import Actor
from ..actions.imports import do_import_runs
from ..forms.hosted_configs import ImportRefused, imported_configs
from ..forms.imports import ImportForm, shape_refusals
from ..models import Experiment
from .access import require_manage, requires


@requires("experiments.add_experiment")
def import_results(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _render(request, ImportForm())
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        return _render(request, form, status=400)
    experiment = None
    if form.cleaned_data.get("experiment"):
        experiment = get_object_or_404(Experiment.objects.select_related("host", "profile"),
                                       pk=form.cleaned_data["experiment"])  # fmt: skip
        require_manage(request, experiment)
    errors: dict[str, list[str]] = {}
    files, skipped_entries = form.read(request.FILES.getlist("uploads"), errors)
    if not errors and experiment is not None:
        errors = shape_refusals(experiment, files)
    if errors:
        return _render(request, form, errors=errors, status=400)
    host = experiment.host if experiment is not None else form.cleaned_data["host"]
    try:
        configs = imported_configs([(w, f.name, f.format, [r.server for r in f.runs]) for w, f in files], host)
    except ImportRefused as exc:
        return _render(request, form, errors=exc.errors, status=400)
    outcome = do_import_runs(
        actor=Actor.of(request), files=[f for _, f in files], configs=configs, experiment=experiment,
        name=form.cleaned_data["name"], host=None if experiment is not None else host,
    )  # fmt: skip
    for made in dict.fromkeys(outcome.experiments):
        count = sum(1 for r in outcome.runs if r.experiment_id == made.pk)
        messages.success(request, f"Imported {count} run(s) into “{made.name}” ({made.profile.name}).")
    for skipped in outcome.skipped:
        messages.info(request, f"{skipped.name}: imported before (the same bytes): nothing changed.")
    if skipped_entries:
        messages.info(request, f"Not result files, skipped: {', '.join(skipped_entries[:10])}.")
    target = outcome.experiments[0] if outcome.experiments else outcome.skipped[0].runs[0].experiment
    return redirect(target)


def _render(request: HttpRequest, form: ImportForm, *, errors: dict | None = None, status: int = 200) -> HttpResponse:
    return render(request, "experiments/import_results.html", {"form": form, "errors": errors or {}}, status=status)
