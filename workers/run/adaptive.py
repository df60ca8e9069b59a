"""An adaptive server's schedule on the host: the config's `--speculative-adaptive-config` JSON written to a file
under the run's work directory (over SFTP: its text never reaches a command line), and the flags that name it.

The path is made of the host's work directory (an admin's) and the run's id alone; the launch command quotes it as
one word like every other value (`workers.ssh.quote_command`).
"""

from __future__ import annotations

import shlex

from experiments.models import AdaptiveSchedule

from ..ssh import HostConnection
from .database import db


def config_path(work_dir: str, run_id: int) -> str:
    return f"{work_dir}/runs/run-{int(run_id)}-adaptive.json"


def _schedule_text(schedule_id: int | None) -> str | None:
    if schedule_id is None:
        return None
    return AdaptiveSchedule.objects.values_list("config_json", flat=True).get(pk=schedule_id)


async def install(conn: HostConnection, work_dir: str, run_id: int, schedule_id: int | None) -> str | None:
    """Write the schedule of this run's config to the host; its path there, or None for a config without one."""
    text = await db(_schedule_text)(schedule_id)
    if text is None:
        return None
    path = config_path(work_dir, run_id)
    await conn.run(f"mkdir -p -- {shlex.quote(f'{work_dir}/runs')}", timeout=30)
    await conn.put_bytes(text.encode(), path)
    return path
