"""Server configs, their secret-looking environment values masked (every reader of the team sees this), as the API
and the pickers show them, and a config with its history; the profiles as the pickers show them."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from experiments.models import BenchmarkProfile, ServerConfig
from experiments.reads.config_history import (
    config_box_values,
    config_runs,
    config_versions,
    profile_initial,
    version_names,
)
from experiments.rules import secrets


def config_json(config: ServerConfig) -> dict[str, Any]:
    """A config as the JSON API shows one (`/api/configs`), plus where it came from and where its page is. Its
    environment's secret-looking values are masked: every reader of the team sees this."""
    spec = config.launch_spec()
    return {
        "id": config.pk,
        "name": config.name,
        "content_hash": config.content_hash,
        "short_hash": config.short_hash,
        **spec,
        "env": secrets.shown(spec.get("env") or {}),
        "derived_from": config.derived_from_id,
        "created_at": config.created_at.isoformat(),
        "url": reverse("config_detail", args=[config.pk]),
    }


def config_search_json(configs: list[ServerConfig]) -> list[dict[str, Any]]:
    """What a picker needs per config: who it is (name, hash, what it launches) to choose it, and `form`, its values
    as the boxes take them, with `version_name` for the block's name once the user changes something."""
    versions = version_names({c.name for c in configs})
    return [
        {
            **config_json(config),
            "created_by": config.created_by.get_username() if config.created_by else None,
            "version_name": versions[config.name],
            "form": config_box_values(config),
        }
        for config in configs
    ]


def profile_search_json(profiles: list[BenchmarkProfile]) -> list[dict[str, Any]]:
    return [
        {
            "id": p.pk,
            "name": p.name,
            "summary": p.summary,
            "created_at": p.created_at.isoformat(),
            "created_by": p.created_by.get_username() if p.created_by else None,
            "form": profile_initial(p),
        }
        for p in profiles
    ]


def config_history_json(config: ServerConfig) -> dict[str, Any]:
    """A config with its versions and runs, for the JSON API (`GET /api/configs/{id}`)."""
    return {
        **config_json(config),
        "created_by": config.created_by.get_username() if config.created_by else None,
        "versions": [
            {**config_json(v.config), "relation": v.relation, "differs": v.differs} for v in config_versions(config)
        ],
        "runs": [
            {
                "id": r.run.pk,
                "experiment": r.run.experiment_id,
                "experiment_name": r.run.experiment.name,
                "host": r.run.host.name,
                "role": "baseline" if r.is_baseline else "candidate",
                "state": r.run.state,
                "output_tok_s": {str(c): round(t, 3) for c, t in r.throughput},
                "url": r.run.get_absolute_url(),
            }
            for r in config_runs(config)
        ],
    }
