"""An adaptive server's launch over the real sshd: the schedule's JSON reaches the host as a file under the run's
work directory (over SFTP, never on a command line), and the launcher receives exactly the config's flags followed
by `--speculative-adaptive --speculative-adaptive-config <that file>`, one word each, even in a work directory whose
name is shell syntax (the host's launcher is a probe that prints the argv it got)."""

from __future__ import annotations

import json
import shlex
import uuid
from pathlib import Path

import pytest
from django.db import connections

from experiments.models import AdaptiveSchedule, ServerConfig
from experiments.tests.factories import make_eagle_config, make_experiment, make_host
from workers import hosts
from workers.run import adaptive, server
from workers.run.database import db
from workers.ssh import quote_command
from workers.tests.run.test_launch_safety import PROBE, Remote

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SCHEDULE = '{\n  "1": {\n    "candidate_steps": [2]\n  },\n  "8": {\n    "candidate_steps": [0]\n  }\n}\n'


def _argv(config: ServerConfig, port: int) -> list[str]:
    """The launch flags, spelled out here rather than by the code under test."""
    return [
        "--model-path", config.model_path, "--tp-size", str(config.tp_size), "--host", "127.0.0.1", "--port", str(port),
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", config.speculative_draft_model_path,
        "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3",
        *config.extra_args, "--enable-metrics",
    ]  # fmt: skip


def test_it_ships_the_schedule_as_a_file_and_names_it_after_the_configs_flags(sshd, tmp_path: Path):
    canary = tmp_path / "CANARY"
    # An admin's work directory whose name would run a command if anything ever evaluated it.
    work_dir = str(tmp_path / f"work $(touch {canary}) '; touch {canary}; '")
    host = make_host(name="probe", launcher=PROBE, server_port=31004, work_dir=work_dir)
    schedule = AdaptiveSchedule.objects.create(
        experiment=make_experiment(with_runs=False), version=1, config_json=SCHEDULE
    )
    adaptive_config = make_eagle_config(2, adaptive_schedule=schedule)
    switched = make_eagle_config(2, adaptive_schedule=schedule, extra_args=["--speculative-adaptive"])
    static = make_eagle_config(2)
    remote = Remote(sshd)
    try:
        work = remote(hosts.work_dir(remote.conn, host))
        run_id = uuid.uuid4().int % 100_000
        path = remote(adaptive.install(remote.conn, work, run_id, schedule.pk))
        nothing = remote(adaptive.install(remote.conn, work, run_id + 1, static.adaptive_schedule_id))
        seen = [
            json.loads(remote(remote.conn.run(server.launch_command(host, c, adaptive_config=p))).stdout)["argv"]
            for c, p in ((adaptive_config, path), (switched, path), (static, nothing))
        ]
        on_host = remote(remote.conn.run(quote_command(["cat", "--", f"{work}/runs/run-{run_id}-adaptive.json"])))
        shown = server.launch_command(host, adaptive_config, for_display=True, adaptive_config=path)
    finally:
        remote(db(connections.close_all)())  # the connection of the thread the schedule was read through
        remote(remote.conn.close())
        remote.loop.close()

    assert path == f"{work}/runs/run-{run_id}-adaptive.json" and work.startswith(work_dir)
    assert on_host.stdout == SCHEDULE  # byte for byte what the schedule stores
    flags = ["--speculative-adaptive", "--speculative-adaptive-config", path]
    assert seen[0] == [*_argv(adaptive_config, 31004), *flags]
    assert seen[1] == [*_argv(switched, 31004), *flags[1:]]  # the config's own switch is not repeated
    assert nothing is None and seen[2] == _argv(static, 31004)
    assert shlex.split(shown)[-3:] == flags  # the run page shows the file it was given
    assert not canary.exists()
