"""The one `api`, with every noun's routes registered on it (importing the modules registers them)."""

from . import (  # noqa: F401  (registers the routes)
    compare,
    configs,
    environments,
    experiments,
    headroom,
    hosts,
    imports,
    prompts,
    runs,
    schedules,
    studies,
    sweeps,
    users,
)
from .base import api

__all__ = ["api"]
