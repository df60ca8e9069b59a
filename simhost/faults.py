"""Faults on demand: `SIMHOST_FAULTS=a,b` and/or a `simhost-faults` file in the working directory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from simhost.knobs import FAULTS

KNOWN = {name for name, _ in FAULTS}


def active(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> frozenset[str]:
    """The active fault names; raises ValueError on an unknown one (a typo must not pass silently)."""
    env = os.environ if env is None else env
    words = env.get("SIMHOST_FAULTS", "").replace(",", " ").split()
    path = (cwd or Path.cwd()) / "simhost-faults"
    if path.is_file():
        for line in path.read_text().splitlines():
            words += line.split("#", 1)[0].replace(",", " ").split()
    unknown = sorted(set(words) - KNOWN)
    if unknown:
        raise ValueError(f"unknown simhost fault(s): {', '.join(unknown)}; known: {', '.join(sorted(KNOWN))}")
    return frozenset(words)
