"""How a specdash Host reaches this simulated host: the shell lines a real host's setup would hold."""

from __future__ import annotations

import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# A /health answer latency for the test suite's hosts (SGLang's, and simhost's default, is 1 s): every launch waits
# through it at least twice (loading, then warm-up), ~2 s a launch over the suite's few hundred launches.
FAST_HEALTH_POLL_SECONDS = 0.2


def shell_setup(
    state_dir: Path,
    load_seconds: float | str,
    health_poll_seconds: float | None = None,
    sglang_version: str | None = None,
    vllm_version: str | None = None,
) -> str:
    """Put the nvidia-smi shim and the venv on PATH (a real host activates its SGLang venv here).

    `health_poll_seconds` shortens /health's answer latency (SGLang's 1 s poll, simhost's default): the suite's
    launches then spend a fraction of a second, not two, between the weights loaded and the worker seeing it.
    `sglang_version` is the SGLang the host imitates (versions.SUPPORTED; unset: versions.DEFAULT); `vllm_version`
    the vLLM its `VLLM_LAUNCHER` imitates (vllm.versions.SUPPORTED; unset: vllm.versions.DEFAULT)."""
    path = f"{shlex.quote(str(REPO / 'simhost' / 'bin'))}:{shlex.quote(str(REPO / '.venv' / 'bin'))}"
    return "\n".join(
        [
            f"export PATH={path}:$PATH",
            # simhost/site: the version files and metadata a real SGLang install has (what a fingerprint reads).
            f"export PYTHONPATH={shlex.quote(str(REPO))}:{shlex.quote(str(REPO / 'simhost' / 'site'))}",
            f"export SIMHOST_STATE_DIR={shlex.quote(str(state_dir))}",
            f"export SIMHOST_LOAD_SECONDS={shlex.quote(str(load_seconds))}",
        ]
        + ([f"export SIMHOST_HEALTH_POLL_SECONDS={float(health_poll_seconds)}"] if health_poll_seconds else [])
        + ([f"export SIMHOST_SGLANG_VERSION={shlex.quote(sglang_version)}"] if sglang_version else [])
        + ([f"export SIMHOST_VLLM_VERSION={shlex.quote(vllm_version)}"] if vllm_version else [])
    )


MODELS_ROOT = REPO / "simhost" / "models"
LAUNCHER = "python -m simhost.launch_server"
# `vllm serve` on the simulated host: `{VLLM_LAUNCHER} MODEL [flags]` (README.md, "vLLM").
VLLM_LAUNCHER = "python -m simhost.vllm_serve"
# SpecForge's CLI on the simulated host: `{SPECFORGE_LAUNCHER} export --to sglang ...` (simhost/specforge.py).
SPECFORGE_LAUNCHER = "python -m simhost.specforge"
# Each launcher of the simulated host by the Host field that holds it (the demo registers them all).
LAUNCHERS = {"launcher": LAUNCHER, "vllm_launcher": VLLM_LAUNCHER, "specforge_launcher": SPECFORGE_LAUNCHER}


def processes_of(state_dir: Path) -> list[int]:
    """The live processes (not zombies) of this simulated host's state dir: every server and scheduler started through
    its shell setup carries SIMHOST_STATE_DIR in its environment, registered GPU memory or not (a server still
    loading has none yet). What a demo or a test kills when its host goes away."""
    needle = f"SIMHOST_STATE_DIR={state_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        found.append(int(entry.name))
    return found
