"""Prompt sets: the list with the upload form, and one set's page (its categories and first prompts)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from experiments.formats.prompt_sampling import PromptSetError

from ..actions.audit import Actor
from ..actions.prompts import PublishRefused, do_create_prompt_set
from ..forms import PromptSetUploadForm
from ..models import PromptSet
from .access import requires

PREVIEW_PROMPTS = 20


@requires("experiments.view_promptset")
def prompt_set_list(request: HttpRequest) -> HttpResponse:
    return _render_list(request, PromptSetUploadForm())


@requires("experiments.add_promptset")
@require_POST
def create_prompt_set(request: HttpRequest) -> HttpResponse:
    form = PromptSetUploadForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            prompt_set = do_create_prompt_set(Actor.of(request), form.cleaned_data["name"], form.cleaned_data["file"])
        except PromptSetError as exc:
            form.add_error("file", str(exc))
        except PublishRefused as exc:
            form.add_error("name", str(exc))
            return _render_list(request, form, status=403)
        else:
            messages.success(request, f"Prompt set “{prompt_set}” holds {prompt_set.prompt_count} prompts.")
            return redirect("prompt_set_detail", prompt_set.pk)
    return _render_list(request, form, status=400)


@requires("experiments.view_promptset")
def prompt_set_detail(request: HttpRequest, prompt_set_id: int) -> HttpResponse:
    prompt_set = get_object_or_404(PromptSet.objects.select_related("created_by"), pk=prompt_set_id)
    preview = [
        {"category": c.get("category"), "turns": c.get("turns", [])[:2]}
        for c in prompt_set.conversations[:PREVIEW_PROMPTS]
    ]
    return render(request, "experiments/prompt_set_detail.html", {"prompt_set": prompt_set, "preview": preview})


def _render_list(request: HttpRequest, form: PromptSetUploadForm, status: int = 200) -> HttpResponse:
    sets = PromptSet.objects.select_related("created_by").defer("conversations")
    context = {"prompt_sets": sets, "form": form}
    return render(request, "experiments/prompt_set_list.html", context, status=status)
