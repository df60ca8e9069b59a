"""Server configs, their secret-looking environment values masked: every reader of the team sees this."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from experiments.models import (
    ServerConfig,
)
from experiments.rules import launch_policy


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
        "env": launch_policy.masked(spec.get("env") or {}),
        "derived_from": config.derived_from_id,
        "created_at": config.created_at.isoformat(),
        "url": reverse("config_detail", args=[config.pk]),
    }
