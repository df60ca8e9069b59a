"""A method bake-off end to end: a study over three methods (EAGLE-3, DFlash, DSpark) at two concurrency bands on the
simulated host running SGLang 0.5.23 (the era that knows DFlash and DSpark), through the API, a Celery worker and
the real sshd. Its recommendation changes with the band (the block drafter alone is ~2.4x single-stream, and slower
than the baseline at 16 requests, whose verify grows with batch x block), and the bake-off, page and API, says exactly
what the study's own trials and recommendation say."""

from __future__ import annotations

import pytest

from experiments.models import ApiToken, Host, Run, Study
from experiments.tests.test_end_to_end_study import TP_SIZE, _runs
from experiments.tests.waiting import until
from simhost import versions

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
LEVELS = [1, 16]
# The simulated GPUs at four times their pace: their steps keep the speed model's clock, in a quarter of the time.
FAST = {"SIMHOST_LOAD_SECONDS": "0.2", "SIMHOST_SPEED": "4"}


def test_a_study_over_three_methods_recommends_by_band_and_its_bakeoff_says_the_same(
    client, owner, sim_host: Host, celery_worker_process
):
    sim_host.shell_setup += f"\nexport SIMHOST_SGLANG_VERSION={versions.NEWEST}"
    sim_host.save()
    _, token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {token}"}
    models = sim_host.models_root
    target = {"model_path": f"{models}/kimi-k2.5-sim", "tp_size": TP_SIZE, "env": FAST}
    payload = {
        "name": "which method",
        "host": sim_host.name,
        "baseline": {"name": "baseline", **target},
        "sweep": {
            "base": {
                **target,
                "speculative_algorithm": "EAGLE3",
                "speculative_draft_model_path": f"{models}/kimi-k2.5-sim-eagle3",
                "speculative_num_steps": 2,
                "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 3,
            },
            "methods": ["EAGLE3", f"DFLASH={models}/kimi-k2.5-sim-dflash", "DSPARK"],
            "speculative_num_steps": [2],
            "speculative_eagle_topk": [1],
        },
        "profile": {"concurrency": LEVELS, "num_prompts": 16, "input_len": 32, "output_len": 32, "passes": 1},
        # Two rounds of the baseline and the three methods: each config launched twice, so every cell has an interval.
        "budget": {"launches": 8},
        "round_size": 3,
    }

    response = client.post("/api/studies", payload, content_type="application/json", headers=headers)

    assert response.status_code == 201, response.content
    study = Study.objects.get(pk=response.json()["id"])
    until(lambda: not Study.objects.get(pk=study.pk).is_running, 240, "the study's end", lambda: _runs(study))
    body = client.get(f"/api/studies/{study.pk}", headers=headers).json()
    runs = Run.objects.filter(experiment__studyround__study=study)
    assert all(run.state == Run.State.SUCCEEDED for run in runs), _runs(study)
    names = {t["config"]: t["values"].get("method") for t in body["trials"] if not t["is_baseline"]}
    assert sorted(names.values()) == ["DFLASH", "DSPARK", "EAGLE3"], names

    # The answer changes with the band: the block drafter alone, nothing at 16 requests.
    bands = body["recommendation"]
    assert [(band["low"], band["high"]) for band in bands] == [(1, 1), (16, 16)], bands
    said = {t["config"]: (t["state"], t["speedups"], [c["launches"] for c in t["cells"]]) for t in body["trials"]}
    assert names.get(bands[0]["config"]) == "DFLASH" and bands[1]["config"] == "baseline", said

    # The bake-off: every cell is the study's own comparison of that config at that concurrency, and its bands are
    # the recommendation's.
    bakeoff = client.get(f"/api/studies/{study.pk}/bakeoff", headers=headers).json()
    best = {(b["concurrency"], b["config"]) for b in body["best"]}
    speedups = {(t["config"], int(level)): s for t in body["trials"] for level, s in t["speedups"].items()}
    methods = {m["method"]: m for m in bakeoff["methods"]}
    assert set(methods) == {"EAGLE3", "DFLASH", "DSPARK"}
    for method in methods.values():
        for cell in method["cells"]:
            assert names[cell["candidate"]] == method["method"]
            assert cell["speedup"] == pytest.approx(speedups[cell["candidate"], cell["concurrency"]], abs=1e-3)
            assert cell["wins"] == ((cell["concurrency"], cell["candidate"]) in best)
    assert [(b["label"], b["method"]) for b in bakeoff["bands"]] == [("c = 1", "DFLASH · SGLang"), ("c = 16", None)]
    assert bakeoff["headline"].startswith("Best method by concurrency: c = 1: DFLASH · SGLang, DFLASH-d")
    # What each method costs besides time, from its servers' own log lines: DFlash's drafter and its own KV cache
    # leave fewer tokens than EAGLE-3's head (simhost/README.md, "Memory").
    dflash, eagle = methods["DFLASH"], methods["EAGLE3"]
    assert dflash["kv_tokens_given_up"] > eagle["kv_tokens_given_up"] > 0, bakeoff
    assert dflash["draft_weights_gib"] > eagle["draft_weights_gib"] > 0, bakeoff

    client.force_login(owner)
    page = client.get(f"/studies/{study.pk}/bakeoff/").content.decode()
    assert "DFLASH · SGLang" in page and "fewer KV-cache tokens than the baseline" in page
