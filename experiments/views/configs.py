"""Stored configs: the list (searchable), one config's page with its history, and the searches behind the
new-experiment page's "Load a saved config…" and "Load a saved profile…" pickers."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render

from experiments import serializers
from experiments.analysis.config_diff import config_diff_rows
from experiments.reads.config_history import (
    SEARCH_LIMIT,
    config_runs,
    config_versions,
    search_configs,
    search_profiles,
    with_run_count,
)

from ..models import ServerConfig
from .access import requires
from .paging import PageLinks

CONFIGS_PAGE = 50


@requires("experiments.view_serverconfig")
def config_list(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "")
    configs = with_run_count(search_configs(query).select_related("created_by"))
    page = Paginator(configs, CONFIGS_PAGE).get_page(request.GET.get("page"))
    context = {"page": page, "q": query, "page_links": PageLinks({"q": query} if query else {})}
    return render(request, "experiments/config_list.html", context)


@requires("experiments.view_serverconfig")
def config_detail(request: HttpRequest, config_id: int) -> HttpResponse:
    config = get_object_or_404(ServerConfig.objects.select_related("created_by", "derived_from"), pk=config_id)
    context = {
        "config": config,
        # The launch fields as the experiment page's Configs table writes them (its hash is shown whole above).
        "fields": [row for row in config_diff_rows([config]) if row.field != "content_hash"],
        "versions": config_versions(config),
        "runs": config_runs(config),
        "run_count": config.run_set.count(),
    }
    return render(request, "experiments/config_detail.html", context)


@requires("experiments.view_serverconfig")
def config_search(request: HttpRequest) -> JsonResponse:
    """GET ?q=: at most SEARCH_LIMIT configs, newest first, with the values a config block's boxes take;
    `baseline=1`: only configs without speculation (the page's baseline block has no speculative fields)."""
    configs = search_configs(request.GET.get("q", "")).select_related("created_by")
    if request.GET.get("baseline") == "1":
        configs = configs.filter(speculative_algorithm="")
    return JsonResponse({"configs": serializers.config_search_json(list(configs[:SEARCH_LIMIT]))})


@requires("experiments.view_benchmarkprofile")
def profile_search(request: HttpRequest) -> JsonResponse:
    """GET ?q=: at most SEARCH_LIMIT profiles, newest first, with the values the profile boxes take."""
    profiles = list(search_profiles(request.GET.get("q", "")).select_related("created_by")[:SEARCH_LIMIT])
    return JsonResponse({"profiles": serializers.profile_search_json(profiles)})
