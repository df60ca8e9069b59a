"""Remedies that are the host's, acted on by an admin: host memory, the environment every process gets, GPUs held
by processes that are not the run's. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .values import Evidence, Link, Remedy, first_line

# teardown ("pid 12 still holds 900 MiB"), preflight ("pid 12 holds 900 MiB"), both also in a host's dirty reason.
_HELD = re.compile(r"pid (\d+) (?:still )?holds (\d+ MiB|GPU memory)")
_MISSING_ENV = re.compile(r"([A-Za-z_][\w, ]*) missing in pid (\d+)")
# The kernel's SIGKILL as the log shows it: the shell's `Killed`, a rank's exit code -9, the kernel's own line.
_KILLED = re.compile(r"Killed|exit code:? -9|killed by signal 9", re.IGNORECASE)


def free_host_memory(evidence: Evidence) -> Remedy:
    return Remedy(
        "host-memory",
        f"Free host memory on {evidence.host_name}",
        f"The kernel's OOM killer ended a server process: “{first_line(evidence.text, _KILLED)}”. That is the host's "
        "RAM, not GPU memory, so no config change helps: an admin frees memory on the host (other processes, "
        "another server still loading) or adds some, then the run can be repeated.",
        admin=True,
        link=Link.HOST,
    )


def host_env(evidence: Evidence, spec: Mapping[str, Any]) -> Remedy:
    env = spec.get("env") or {}
    missing: dict[str, list[str]] = {}
    for names, pid in _MISSING_ENV.findall(evidence.message):
        for name in (n.strip() for n in names.split(",")):
            missing.setdefault(name, []).append(pid)
    lines = [f"export {name}={env[name]}" for name in missing if name in env]
    exports = f" (e.g. {'; '.join(lines)})" if lines else ""
    return Remedy(
        "host-env",
        f"Set the environment on {evidence.host_name} itself",
        f"{evidence.message.rstrip('.')}. The launch exports the config's variables, yet these processes started "
        "without them: something on the host between the launch and the server's workers drops them (a wrapper "
        "launcher, a container runtime, a shell setup that resets the environment). An admin sets them for every "
        f"process in the host's shell setup{exports}, or fixes what drops them.",
        admin=True,
        link=Link.HOST,
    )


def clean_host(evidence: Evidence) -> Remedy | None:
    """The processes holding GPU memory, when the failure or the host's dirty mark names them; a clean by an admin."""
    held = _HELD.findall(f"{evidence.message}\n{evidence.host_dirty_reason or ''}")
    dirty = evidence.host_dirty_reason is not None
    if not dirty and not (held and evidence.kind in ("preflight", "teardown_incomplete")):
        return None
    holders = {pid: "" if amount == "GPU memory" else amount for pid, amount in held}  # "": amount not reported
    if evidence.kind == "zombie":
        holders.update((str(pid), holders.get(str(pid), "")) for pid in evidence.pids if str(pid) not in holders)
    listed = ", ".join(f"pid {pid}" + (f" ({amount})" if amount else "") for pid, amount in holders.items())
    who = f"{listed} hold GPU memory" if listed else "Processes hold GPU memory"
    if dirty:
        return Remedy(
            "clean-host",
            f"Clean {evidence.host_name}",
            f"{who} on {evidence.host_name}, which is marked dirty ({evidence.host_dirty_reason}): no run starts "
            "there until an admin stops them on the host (kill -9) and marks it clean.",
            admin=True,
            link=Link.HOST,
        )
    return Remedy(
        "clean-host",
        f"Free the GPUs of {evidence.host_name}",
        f"{who} on {evidence.host_name}. An admin stops them on the host (or asks their owner to), then the run "
        "can be repeated.",
        admin=True,
        link=Link.HOST,
    )
