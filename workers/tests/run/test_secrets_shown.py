"""A secret-looking value in a config's environment never reaches a page or a file another reader opens: the config
JSON and page, the experiment page and its export, the run page's launch command, the config search, the saved-config
pickers and "Duplicate & edit" (whose masked boxes, submitted, still launch the real value)."""

from __future__ import annotations

import pytest

from experiments.models import Experiment, Host, Run
from experiments.reads.config_history import config_box_values, profile_initial
from experiments.rules import secrets
from experiments.rules.secrets import MASK
from experiments.tests.factories import make_config, make_eagle_config, make_experiment, make_host, make_profile
from workers.run.server import launch_command, launch_secrets

pytestmark = pytest.mark.django_db

TOKEN = "hf_Sup3rS3cretT0ken"


def test_a_viewer_never_sees_a_configs_secret(client, viewer):
    candidate = make_eagle_config(name="eagle3", env={"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"})
    experiment = make_experiment(baseline=make_config(name="baseline"), candidates=[candidate])
    run = experiment.run_set.get(config=candidate)
    host = Host(name="gpu", launcher="python -m sglang.launch_server", server_port=30000, models_root="/models")
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
    assert MASK in pages["config json"] and "NCCL_PROTO" in pages["config json"]
    assert "on standard input: HF_TOKEN" in pages["run page"]  # the launch command names the secret, no value


def test_the_command_that_runs_leaves_the_secret_to_its_standard_input():
    config = make_eagle_config(env={"HF_TOKEN": TOKEN})
    host = Host(name="gpu", launcher="python -m sglang.launch_server", server_port=30000, models_root="/models")

    assert TOKEN not in launch_command(host, config) and TOKEN not in launch_command(host, config, for_display=True)
    assert launch_secrets(host, config) == {"HF_TOKEN": TOKEN}  # handed to the server on standard input


def test_duplicate_and_edit_and_the_pickers_show_the_secret_masked(client, member):
    candidate = make_eagle_config(name="eagle3", env={"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"})
    experiment = make_experiment(baseline=make_config(name="baseline"), candidates=[candidate])
    run = experiment.run_set.get(config=candidate)
    client.force_login(member)

    pages = {
        "duplicate experiment": client.get("/experiments/new/", {"from": experiment.pk}),
        "duplicate run": client.get("/experiments/new/", {"run": run.pk}),
        "duplicate config": client.get("/experiments/new/", {"config": candidate.pk}),
        "picker": client.get("/configs/search.json", {"q": "eagle3"}),
    }

    for where, response in pages.items():
        assert response.status_code == 200, where
        assert TOKEN not in response.content.decode(), where
    assert f"HF_TOKEN={MASK}" in pages["duplicate config"].content.decode()


def _post(host, blocks: dict, name: str) -> dict:
    post = {"experiment-name": name, "experiment-host": host.name, "candidate_count": str(len(blocks) - 1)}
    for prefix, values in blocks.items():
        post.update({f"{prefix}-{key}": value for key, value in values.items() if value is not False})
    post.update({f"profile-{key}": value for key, value in profile_initial(make_profile()).items()})
    return post


def test_a_masked_secret_submitted_from_a_loaded_config_launches_the_stored_value(client, member):
    host = make_host()
    stored = make_eagle_config(name="eagle3", env={"HF_TOKEN": TOKEN})
    blocks = {"baseline": config_box_values(make_config(name="baseline")), "cand-0": config_box_values(stored)}
    assert blocks["cand-0"]["env_text"] == f"HF_TOKEN={MASK}"
    client.force_login(member)

    response = client.post("/experiments/new/", _post(host, blocks, "unchanged"))

    assert response.status_code == 302, response.content.decode()[:2000]
    (candidate,) = Experiment.objects.get(name="unchanged").ordered_candidates()
    assert candidate == stored and secrets.revealed(candidate.env) == {"HF_TOKEN": TOKEN}

    # Changed, the new version keeps the secret; the mask never becomes a value.
    blocks["cand-0"] = {**blocks["cand-0"], "name": "eagle3 v2", "env_text": f"HF_TOKEN={MASK}\nNCCL_PROTO=LL"}
    client.post("/experiments/new/", _post(host, blocks, "changed"))
    (version,) = Experiment.objects.get(name="changed").ordered_candidates()
    assert secrets.revealed(version.env) == {"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"} and version.derived_from == stored


def test_a_mask_without_a_source_that_has_the_secret_is_refused(client, member):
    host = make_host()
    blocks = {
        "baseline": config_box_values(make_config(name="baseline")),
        "cand-0": {**config_box_values(make_eagle_config(name="plain")), "env_text": f"HF_TOKEN={MASK}"},
    }
    client.force_login(member)

    response = client.post("/experiments/new/", _post(host, blocks, "guessing"))

    assert response.status_code == 400
    assert "HF_TOKEN shows (hidden): type its value" in response.content.decode()
    assert not Experiment.objects.filter(name="guessing").exists()
