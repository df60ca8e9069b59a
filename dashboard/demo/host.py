"""The demo's simulated host as it is registered: its shell setup puts the simulator on the host's PATH, on the newest
SGLang profile it imitates, so that every action a page offers (an adaptive schedule needs 0.5.23's
`--speculative-adaptive`) is one its SGLang serves."""

from __future__ import annotations

import os
from pathlib import Path

from simhost import hostsetup, versions
from simhost.vllm import versions as vllm_versions


def shell_setup(var: Path) -> str:
    """The shell setup of the demo's host, whose state lives under `var` (SIMHOST_LOAD_SECONDS: its load time)."""
    load_seconds = os.environ.get("SIMHOST_LOAD_SECONDS", "6")
    return hostsetup.shell_setup(
        var / "simhost-state", load_seconds, sglang_version=versions.NEWEST, vllm_version=vllm_versions.NEWEST
    )
