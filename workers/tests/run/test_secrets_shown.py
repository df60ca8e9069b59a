"""A secret-looking value in a config's environment never reaches a page or a file another reader opens: the config
JSON and page, the experiment page and its export, the run page's launch command, the config search."""

from __future__ import annotations

import pytest

from experiments.models import Host, Run
from experiments.rules.launch_policy import SECRET_MASK
from experiments.tests.factories import make_config, make_eagle_config, make_experiment
from workers.run.server import launch_command

pytestmark = pytest.mark.django_db

TOKEN = "hf_Sup3rS3cretT0ken"


def test_a_viewer_never_sees_a_configs_secret(client, viewer):
    candidate = make_eagle_config(name="eagle3", env={"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"})
    experiment = make_experiment(baseline=make_config(name="baseline"), candidates=[candidate])
    run = experiment.run_set.get(config=candidate)
    host = Host(name="gpu", launcher="python -m sglang.launch_server", server_port=30000)
    shown = launch_command(host, candidate, for_display=True)  # what the run stores when it launches
    Run.objects.filter(pk=run.pk).update(launch_command=shown, effective_args={"tp_size": 8})
    client.force_login(viewer)

    pages = {
        "config json": client.get(f"/api/configs/{candidate.pk}").content.decode(),
        "config search": client.get("/api/configs", {"q": "eagle3"}).content.decode(),
        "config page": client.get(f"/configs/{candidate.pk}/").content.decode(),
        "experiment page": client.get(experiment.get_absolute_url()).content.decode(),
        "experiment json": client.get(f"/api/experiments/{experiment.pk}").content.decode(),
        "export": client.get(f"/experiments/{experiment.pk}/export.json").content.decode(),
        "run page": client.get(f"/runs/{run.pk}/").content.decode(),
    }

    for where, content in pages.items():
        assert TOKEN not in content, where
    assert SECRET_MASK in pages["config json"] and "NCCL_PROTO" in pages["config json"]
    assert SECRET_MASK in pages["run page"]  # the launch command shows the name, not the value


def test_the_command_that_runs_keeps_the_secret():
    config = make_eagle_config(env={"HF_TOKEN": TOKEN})
    host = Host(name="gpu", launcher="python -m sglang.launch_server", server_port=30000)

    assert f"HF_TOKEN={TOKEN}" in launch_command(host, config)
    assert TOKEN not in launch_command(host, config, for_display=True)
