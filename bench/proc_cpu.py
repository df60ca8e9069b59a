"""What the benches read of this machine's processes from /proc: CPU seconds, resident memory, the whole
machine's busy ticks. Linux only, as the suite's hosts are."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """`pid` and its children (a worker and its pool's processes)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    found = [pid]
    with contextlib.suppress(OSError):
        for child in children.read_text().split():
            found += tree(int(child))
    return found


def _cpu_seconds(stat: str) -> float:
    """User and system CPU seconds from a /proc/<pid>/stat text (fields counted after the command's closing paren,
    which may itself hold spaces)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu_and_rss(pids: list[int]) -> tuple[float, float]:
    """CPU seconds used so far and resident MiB now, summed over `pids` (those gone meanwhile left out)."""
    cpu = rss = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            cpu += _cpu_seconds(Path(f"/proc/{pid}/stat").read_text())
            rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return cpu, rss


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def every_process() -> dict[int, tuple[str, float]]:
    """Every process now: its name (the command's first words) and the CPU seconds it has used so far."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cpu = _cpu_seconds((entry / "stat").read_text())
            words = (entry / "cmdline").read_bytes().split(b"\0")
            name = " ".join(word.decode(errors="replace") for word in words[:3] if word)[:70]
            found[int(entry.name)] = (name, cpu)
    return found


def busiest_since(before: dict[int, tuple[str, float]], count: int = 7) -> list[tuple[int, str, float]]:
    """The processes that used the most CPU since `before` (an `every_process()`): pid, name, CPU seconds. One
    started since counts whole; one gone since is left out."""
    used = []
    for pid, (name, cpu) in every_process().items():
        earlier = before.get(pid)
        spent = cpu - earlier[1] if earlier and earlier[0] == name else cpu
        if spent > 0:
            used.append((pid, name, spent))
    return sorted(used, key=lambda item: -item[2])[:count]
