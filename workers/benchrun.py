"""The shipped benchmark client as a run uses it on the host: its command line from the profile, how long it
may take, and its result read back from its output. Pure."""

from __future__ import annotations

import contextlib
import json
import shlex
from typing import TYPE_CHECKING, Any

from .ssh import quote_command

if TYPE_CHECKING:
    from experiments.models import BenchmarkProfile, Host

# Copied to the host's work directory at launch; run from there as `python -m benchclient`.
REMOTE_DIR = ".specdash"
TIMEOUT_MARGIN_S = 60


def command(host: Host, profile: BenchmarkProfile, concurrency: int, work_dir: str) -> str:
    """The shell command that benchmarks the host's server at `concurrency` with `profile`."""
    argv = [
        *shlex.split(host.python),
        "-m",
        "benchclient",
        "--base-url",
        f"http://127.0.0.1:{host.server_port}",
        "--concurrency",
        str(concurrency),
        "--num-prompts",
        str(profile.num_prompts),
        "--input-len",
        str(profile.input_len),
        "--output-len",
        str(profile.output_len),
        "--seed",
        str(profile.seed),
        "--warmup-requests",
        str(profile.warmup_requests),
        "--request-timeout",
        str(profile.request_timeout_s),
    ]
    return f"cd -- {shlex.quote(work_dir + '/' + REMOTE_DIR)} && {quote_command(argv)}"


def timeout(profile: BenchmarkProfile, concurrency: int) -> float:
    """Every wave of `concurrency` requests may take a whole request timeout; then a margin for the warm-up."""
    waves = max(1, profile.num_prompts // concurrency + 1)
    return profile.request_timeout_s * waves + TIMEOUT_MARGIN_S


def result(stdout: str) -> dict[str, Any] | None:
    """The client's JSON summary: its last line that is a JSON object (progress lines may precede it)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            return data if isinstance(data, dict) else None
    with contextlib.suppress(json.JSONDecodeError):
        data = json.loads(stdout)
        return data if isinstance(data, dict) else None
    return None
