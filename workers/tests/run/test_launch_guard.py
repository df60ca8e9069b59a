"""The worker's own checks before and while a server runs: a stored config outside the launch policy never reaches
the host (defence in depth behind the forms), and a log metric whose regex runs out of time is switched off with a
warning on the run instead of freezing the worker's event loop."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.db import connections

from experiments.models import Host, Run, ServerConfig
from experiments.rules.log_metrics import TIMEOUT_KIND, timeout_warning
from experiments.tests.factories import make_config, make_experiment, make_host, make_run
from workers.run import preflight
from workers.run.errors import RunFailed
from workers.run.server import launch_command
from workers.run.server_log import ServerLog
from workers.run.session import RunSession, db

CATASTROPHIC = r"(?P<x>(a+)+)$"
EVIL_LINE = "a" * 10_000 + "b"


def _run(coroutine) -> None:
    """Await `coroutine` as a worker does, closing the DB connection of the ORM's thread after (like drive_run)."""

    async def main() -> None:
        try:
            await coroutine
        finally:
            await db(connections.close_all)()

    asyncio.run(main())


def _config(**fields) -> ServerConfig:
    return ServerConfig(**{"name": "c", "model_path": "/models/m", "tp_size": 1, **fields})


def test_it_builds_no_launch_command_for_a_config_outside_the_policy():
    with pytest.raises(ValueError, match="LD_PRELOAD: not an allowed environment variable"):
        launch_command(Host(name="gpu", models_root="/models"), _config(env={"LD_PRELOAD": "/tmp/evil.so"}))
    with pytest.raises(ValueError, match="--config is never settable"):
        launch_command(Host(name="gpu", models_root="/models"), _config(extra_args=["--config", "/tmp/args.yaml"]))


def test_it_launches_with_a_hosts_extra_prefixes_and_keeps_its_own_unbuffered_output():
    config = _config(env={"SIMHOST_FAULTS": "zombie", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})

    command = launch_command(Host(name="sim", models_root="/models", extra_env_prefixes=["SIMHOST_"]), config)

    assert command.startswith(
        "env PYTHONUNBUFFERED=1 SIMHOST_FAULTS=zombie SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 "
    )
    with pytest.raises(ValueError, match="SIMHOST_FAULTS"):
        launch_command(Host(name="gpu", models_root="/models"), config)


@pytest.mark.parametrize(
    "path",
    ["/etc", "/models/../etc", "/models/./m", "/models//m", "models/m", "/models", "/modelsevil/m"],
)
def test_it_builds_no_launch_command_for_a_model_outside_the_hosts_models_root(path):
    with pytest.raises(ValueError, match="models root"):
        launch_command(Host(name="gpu", models_root="/models"), _config(model_path=path))
    with pytest.raises(ValueError, match="Draft model path"):
        launch_command(Host(name="gpu", models_root="/models"), _config(speculative_draft_model_path=path))


def test_it_launches_nothing_on_a_host_without_a_models_root():
    with pytest.raises(ValueError, match="this host has no models root"):
        launch_command(Host(name="gpu"), _config())


@pytest.mark.django_db(transaction=True)
def test_it_fails_preflight_naming_the_variable_before_touching_the_host():
    host = make_host()
    config = make_config(env={"NCCL_PROTO": "LL", "PYTHONWARNINGS": "ignore::evil.Mod"})
    run = make_run(experiment=make_experiment(host=host, baseline=config, candidates=[], with_runs=False))
    session = RunSession(Run.objects.select_related("host", "config", "experiment__profile").get(pk=run.pk))

    with pytest.raises(RunFailed) as failed:
        _run(preflight.check(session))  # no connection: the policy is checked first

    assert failed.value.kind == Run.FailureKind.PREFLIGHT
    assert "PYTHONWARNINGS: not an allowed environment variable" in failed.value.message
    assert "NCCL_PROTO" not in failed.value.message


@pytest.mark.django_db(transaction=True)
def test_it_switches_a_slow_log_metric_off_with_a_warning_on_the_run():
    config = make_config(log_metrics={"x": CATASTROPHIC, "n": r"n=(?P<n>\d+)"})
    run = make_run(experiment=make_experiment(baseline=config, candidates=[], with_runs=False))
    run = Run.objects.select_related("config").get(pk=run.pk)
    server_log = ServerLog(run)

    async def store_and_act_on_a_batch() -> None:
        await server_log._on_batch(1, [EVIL_LINE, "n=3"], 10_020)
        await server_log.published()

    started = time.process_time()
    _run(store_and_act_on_a_batch())
    elapsed = time.process_time() - started

    # CPU time of this process (its threads included), which a loaded machine does not inflate.
    assert elapsed < 1.0, f"{elapsed:.2f} s"  # storing and broadcasting included; unguarded, this took minutes
    run.refresh_from_db()
    assert [(w["kind"], w["message"]) for w in run.warnings] == [(TIMEOUT_KIND, timeout_warning("x"))]
    assert run.live_facts["metrics"] == {"n": [[2, 3.0]]}
    # A worker that re-attaches the run does not try the pattern again, nor warn twice.
    again = ServerLog(Run.objects.select_related("config").get(pk=run.pk))
    assert list(again.facts.metrics.patterns) == ["n"]


class _Models:
    """A ModelReader of fixed config.json files (no connection)."""

    def __init__(self, configs: dict[str, dict]) -> None:
        self.configs = configs
        self.host = Host(name="gpu", models_root="/models")

    async def config_of(self, path: str, role: str) -> dict:
        return self.configs[path]


@pytest.mark.parametrize(
    ("target", "draft", "refused"),
    [
        ({"model_type": "kimi_k2", "num_nextn_predict_layers": 0}, "", True),
        ({"model_type": "deepseek_v3", "num_nextn_predict_layers": 1}, "", False),
        ({"model_type": "kimi_k2"}, "/models/nextn-head", False),  # an exported head drafts instead
    ],
)
def test_it_fails_preflight_for_nextn_on_a_target_without_mtp_layers(target, draft, refused):
    models = _Models({"/models/m": target, "/models/nextn-head": {"model_type": "kimi_k2"}})
    config = _config(speculative_algorithm="NEXTN", speculative_draft_model_path=draft)

    problem = asyncio.run(preflight.model_problem(models, config))  # type: ignore[arg-type]

    assert (problem is not None and "MTP layers of the target's own checkpoint" in problem) == refused
