"""The JSON API (DESIGN.md contract), one module per noun like the pages. Adapters only: validation lives in forms,
changes in actions. Importing the modules registers their routes on the one `api`."""

from . import (  # noqa: F401  (registers the routes)
    compare,
    configs,
    environments,
    experiments,
    hosts,
    prompts,
    runs,
    studies,
    sweeps,
)
from .base import api

__all__ = ["api"]
