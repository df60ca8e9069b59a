"""Where a config's models may come from: a directory inside the host's models root, written plainly. Pure.

The models root is the admin's choice of what a host serves (its page sets it); a member picks among the models in
it. A path elsewhere would let a member make the server read any directory the SSH user can (and tell, from the
error, whether it exists), and a `..` or a symlink would do the same from inside the root: the submission and the
worker refuse the first two by these rules, and the host resolves symlinks before it reads a model
(`workers.hosts.model_config`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from . import launch_fields

# The fields that name a model directory on the host, with their labels (launch_fields' rows that are paths).
MODEL_PATH_FIELDS = {row.name: row.label for row in launch_fields.all_fields() if row.model_path}


def model_path_refusal(label: str, path: str, models_root: str) -> str | None:
    """Why `path` may not be loaded on a host whose models root is `models_root`; None when it may."""
    if not models_root:
        return f"{label}: this host has no models root, so it serves no model yet (an admin sets it on the host's page)"
    root = posixpath.normpath(models_root)
    if not path.startswith("/"):
        return f"{label} must be an absolute path under the host's models root {root}"
    parts = path.rstrip("/").split("/")[1:]
    if any(part in ("", ".", "..") for part in parts):
        return f"{label} must be written plainly, without '.', '..' or '//' (under the models root {root})"
    if not posixpath.normpath(path).startswith(root.rstrip("/") + "/"):
        return f"{label} {path} is not under the host's models root {root}"
    return None


def model_path_refusals(spec: Mapping[str, Any], models_root: str) -> list[str]:
    """The refusals of every model path a launch spec (`ServerConfig.launch_spec()`) sets."""
    problems = []
    for field, label in MODEL_PATH_FIELDS.items():
        value = spec.get(field)
        if value:
            refusal = model_path_refusal(label, str(value), models_root)
            if refusal:
                problems.append(refusal)
    return problems
