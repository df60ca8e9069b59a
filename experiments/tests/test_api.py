"""The JSON API contract of DESIGN.md, called with a Bearer token like a script would."""

from __future__ import annotations

import csv
import io
import math

import pytest

from experiments.models import ApiToken, BenchmarkProfile, Run, ServerConfig

from .factories import (
    experiment_payload,
    make_config,
    make_eagle_config,
    make_experiment,
    make_history,
    make_host,
    make_log,
    make_measurement,
    make_profile,
    make_run,
    make_ssh_key,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def auth(owner) -> dict[str, str]:
    _, token = ApiToken.issue(owner)
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def experiment():
    return make_experiment()


def _endpoints(experiment, run) -> list[tuple[str, str]]:
    return [
        ("post", "/api/experiments"),
        ("get", f"/api/experiments/{experiment.pk}"),
        ("get", f"/api/experiments/{experiment.pk}/export.csv"),
        ("get", f"/api/runs/{run.pk}"),
        ("get", f"/api/runs/{run.pk}/log"),
        ("post", f"/api/runs/{run.pk}/cancel"),
        ("get", "/api/hosts"),
        ("post", "/api/hosts"),
        ("post", f"/api/hosts/{experiment.host_id}/test"),
        ("get", f"/api/hosts/{experiment.host_id}/models"),
        ("post", f"/api/hosts/{experiment.host_id}/clean"),
        ("get", "/api/configs"),
        ("post", "/api/configs"),
        ("get", "/api/profiles"),
        ("post", "/api/profiles"),
        ("post", f"/api/experiments/{experiment.pk}/rerun"),
    ]


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-token"),
        pytest.param({"Authorization": "Bearer sd_not-a-token"}, id="wrong-token"),
        pytest.param({"Authorization": "Token sd_not-a-token"}, id="wrong-scheme"),
    ],
)
def test_it_refuses_every_endpoint_without_a_valid_token(client, experiment, run, headers):
    for method, url in _endpoints(experiment, run):
        response = getattr(client, method)(url, content_type="application/json", headers=headers)

        assert response.status_code == 401, (method, url)
    run.refresh_from_db()
    assert run.state == Run.State.QUEUED


def test_it_refuses_the_token_of_an_inactive_user(client, owner, auth, experiment):
    owner.is_active = False
    owner.save(update_fields=["is_active"])

    assert client.get("/api/hosts", headers=auth).status_code == 401


def test_it_answers_a_valid_token(client, auth, experiment):
    response = client.get("/api/hosts", headers=auth)

    assert response.status_code == 200
    assert [h["name"] for h in response.json()] == [experiment.host.name]


def test_it_creates_an_experiment_with_interleaved_runs(client, owner, auth):
    host = make_host()
    payload = experiment_payload(host)
    second = {**payload["candidates"][0], "name": "eagle3-3step"}
    second.update(speculative_num_steps=3, speculative_num_draft_tokens=4)
    payload["candidates"].append(second)
    payload["profile"]["launches"] = 2

    response = client.post("/api/experiments", payload, content_type="application/json", headers=auth)

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["url"] == f"/experiments/{body['id']}/"
    names = ["baseline", "eagle3-2step", "eagle3-3step"]
    assert [r["config"] for r in body["runs"]] == names * 2
    assert {r["state"] for r in body["runs"]} == {"queued"}
    runs = Run.objects.filter(experiment_id=body["id"]).order_by("sequence")
    assert [r.pk for r in runs] == [r["id"] for r in body["runs"]]
    assert [(r.sequence, r.launch_index) for r in runs] == [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1), (5, 1)]
    assert all(r.host_id == host.pk and r.experiment.created_by == owner for r in runs)


def test_it_enqueues_the_host_driver_once_the_experiment_is_committed(client, auth, django_capture_on_commit_callbacks):
    host = make_host()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(
            "/api/experiments", experiment_payload(host), content_type="application/json", headers=auth
        )

    assert response.status_code == 201
    assert len(callbacks) == 1


def test_it_takes_configs_and_the_profile_by_id(client, auth):
    host = make_host()
    baseline = make_config(name="stored-baseline")
    candidate = make_eagle_config(steps=3, name="stored-eagle", env={"NCCL_PROTO": "LL"})
    profile = make_profile(concurrency=[2, 8], num_prompts=32, launches=2)
    payload = {
        "name": "by id",
        "host": host.pk,
        "baseline": baseline.pk,
        "candidates": [candidate.pk],
        "profile": profile.pk,
    }

    response = client.post("/api/experiments", payload, content_type="application/json", headers=auth)

    assert response.status_code == 201, response.content
    runs = Run.objects.filter(experiment_id=response.json()["id"]).select_related("config", "experiment__profile")
    assert [r.config.name for r in runs] == ["stored-baseline", "stored-eagle"] * 2
    # Same launch content as the stored configs, so their history lines up by content hash.
    hashes = {r.config.name: r.config.content_hash for r in runs}
    assert hashes == {"stored-baseline": baseline.content_hash, "stored-eagle": candidate.content_hash}
    assert runs[0].experiment.profile.concurrency == [2, 8]
    assert runs[0].experiment.host == host


def test_it_refuses_an_unknown_config_id_and_saves_nothing(client, auth):
    host = make_host()
    payload = {**experiment_payload(host), "candidates": [987654]}
    configs_before = ServerConfig.objects.count()

    response = client.post("/api/experiments", payload, content_type="application/json", headers=auth)

    assert response.status_code == 404
    assert response.json()["detail"] == "candidates.0: no config with id 987654"
    assert ServerConfig.objects.count() == configs_before
    assert BenchmarkProfile.objects.count() == 0


def _finished_experiment():
    """Baseline and one candidate, two launches each, at concurrency 1 and 4; plus a failed run to ignore."""
    baseline = make_config(name="baseline")
    candidate = make_eagle_config(name="eagle3-2step")
    experiment = make_experiment(
        baseline=baseline, candidates=[candidate], profile=make_profile(concurrency=[1, 4]), with_runs=False
    )
    throughput = {
        ("baseline", 0): {1: 100.0, 4: 300.0},
        ("eagle3-2step", 0): {1: 120.0, 4: 290.0},
        ("baseline", 1): {1: 102.0, 4: 310.0},
        ("eagle3-2step", 1): {1: 123.0, 4: 300.0},
    }
    for (name, launch), cells in throughput.items():
        config = baseline if name == "baseline" else candidate
        run = make_run(experiment=experiment, config=config, launch_index=launch, state=Run.State.SUCCEEDED)
        for level, tok_s in cells.items():
            make_measurement(run, concurrency=level, output_throughput=tok_s)
    # A failed run's partial measurements say nothing about speed and must not drag the baseline down.
    failed = make_run(experiment=experiment, config=baseline, launch_index=2, state=Run.State.FAILED)
    make_measurement(failed, concurrency=1, output_throughput=10.0)
    return experiment


def test_it_reports_an_experiment_with_its_comparison(client, auth):
    experiment = _finished_experiment()

    response = client.get(f"/api/experiments/{experiment.pk}", headers=auth)

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "failed"  # one run failed; the others succeeded
    assert len(body["runs"]) == 5
    assert {r["state"] for r in body["runs"]} == {"succeeded", "failed"}
    rows = {(row["candidate"], row["concurrency"]): row for row in body["comparison"]}
    assert set(rows) == {("eagle3-2step", 1), ("eagle3-2step", 4)}
    row = rows["eagle3-2step", 1]
    assert set(row) >= {
        "candidate",
        "concurrency",
        "baseline_tok_s",
        "candidate_tok_s",
        "speedup",
        "ci_low",
        "ci_high",
        "verdict",
    }
    assert row["baseline_tok_s"] == pytest.approx(101.0)
    assert row["candidate_tok_s"] == pytest.approx(121.5)
    # The ratio of geometric means (analysis.py): the centre of the log-scale interval.
    assert row["speedup"] == pytest.approx(math.sqrt(120 * 123 / (100 * 102)), abs=1e-4)
    assert 1 < row["ci_low"] < row["speedup"] < row["ci_high"]
    assert row["verdict"] == "faster"
    assert rows["eagle3-2step", 4]["verdict"] != "faster"


def test_it_reports_the_status_of_a_new_experiment_as_queued(client, auth, experiment):
    body = client.get(f"/api/experiments/{experiment.pk}", headers=auth).json()

    assert body["status"] == "queued"
    assert body["comparison"] == []
    assert [r["config"] for r in body["runs"]] == [experiment.baseline.name, experiment.ordered_candidates()[0].name]


def test_it_answers_404_for_an_unknown_experiment(client, auth):
    assert client.get("/api/experiments/987654", headers=auth).status_code == 404


def test_it_reports_a_run(client, auth):
    run = make_run(
        state=Run.State.FAILED,
        failure_kind=Run.FailureKind.OOM,
        failure_message="CUDA out of memory",
        failure_excerpt="torch.OutOfMemoryError: CUDA out of memory.",
    )
    make_measurement(run, concurrency=4, output_throughput=321.0)

    response = client.get(f"/api/runs/{run.pk}", headers=auth)

    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "failed"
    assert body["failure"]["kind"] == "oom"
    assert body["failure"]["message"] == "CUDA out of memory"
    assert "OutOfMemoryError" in body["failure"]["excerpt"]
    assert [p["state"] for p in body["phases"]] == ["queued"]
    assert [(m["concurrency"], m["output_throughput"]) for m in body["measurements"]] == [(4, 321.0)]


@pytest.mark.parametrize(
    "after, limit, expected",
    [
        pytest.param(0, 1000, list(range(1, 10)), id="all"),
        pytest.param(2, 3, [3, 4, 5], id="across-a-chunk-boundary"),
        pytest.param(3, 4, [4, 5, 6, 7], id="exactly-one-chunk"),
        pytest.param(5, 10, [6, 7, 8, 9], id="rest"),
        pytest.param(6, 1, [7], id="one"),
        pytest.param(9, 5, [], id="at-the-end"),
        pytest.param(50, 5, [], id="past-the-end"),
    ],
)
def test_it_pages_through_the_log_across_chunks(client, auth, run, after, limit, expected):
    make_log(run, [["l1", "l2", "l3"], ["l4", "l5", "l6", "l7"], ["l8", "l9"]])

    response = client.get(f"/api/runs/{run.pk}/log", {"after": after, "limit": limit}, headers=auth)

    assert response.status_code == 200
    body = response.json()
    assert body["lines"] == [{"n": n, "text": f"l{n}"} for n in expected]
    assert body["next"] == (expected[-1] if expected else after)
    assert body["total"] == 9


def test_it_reads_the_whole_log_by_following_next(client, auth, run):
    lines = make_log(run, [[f"line {i}" for i in range(k * 10, k * 10 + 7)] for k in range(5)])
    seen: list[str] = []
    after = 0
    for _ in range(100):
        body = client.get(f"/api/runs/{run.pk}/log", {"after": after, "limit": 4}, headers=auth).json()
        if not body["lines"]:
            break
        seen += [line["text"] for line in body["lines"]]
        after = body["next"]

    assert seen == lines


def test_it_refuses_a_negative_log_position(client, auth, run):
    assert client.get(f"/api/runs/{run.pk}/log", {"after": -1}, headers=auth).status_code == 422
    assert client.get(f"/api/runs/{run.pk}/log", {"limit": 0}, headers=auth).status_code == 422


def test_it_cancels_a_queued_run_at_once(client, auth, run):
    response = client.post(f"/api/runs/{run.pk}/cancel", headers=auth)

    assert response.status_code == 200
    assert response.json() == {"id": run.pk, "state": "cancelled", "cancel_requested": True, "accepted": True}
    run.refresh_from_db()
    assert run.state == Run.State.CANCELLED
    assert run.finished_at is not None
    assert [e["state"] for e in run.timeline] == ["queued", "cancelled"]


def test_it_asks_a_live_run_to_stop_once(client, auth):
    run = make_run(state=Run.State.LOADING)

    first = client.post(f"/api/runs/{run.pk}/cancel", headers=auth).json()
    second = client.post(f"/api/runs/{run.pk}/cancel", headers=auth).json()

    # The orchestrator tears the live server down and moves the run on; the API only asks.
    assert first == {"id": run.pk, "state": "loading", "cancel_requested": True, "accepted": True}
    assert second["accepted"] is False


@pytest.mark.parametrize("state", [Run.State.SUCCEEDED, Run.State.FAILED, Run.State.CANCELLED])
def test_it_does_not_cancel_a_finished_run(client, auth, state):
    run = make_run(state=state)

    body = client.post(f"/api/runs/{run.pk}/cancel", headers=auth).json()

    assert body["accepted"] is False
    assert body["state"] == state
    run.refresh_from_db()
    assert run.state == state and not run.cancel_requested


def test_it_exports_the_comparison_as_csv(client, auth):
    experiment = _finished_experiment()

    response = client.get(f"/api/experiments/{experiment.pk}/export.csv", headers=auth)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert f"experiment-{experiment.pk}-comparison.csv" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert list(rows[0]) == [
        "candidate",
        "concurrency",
        "baseline_tok_s",
        "candidate_tok_s",
        "speedup",
        "ci_low",
        "ci_high",
        "verdict",
    ]
    assert [(r["candidate"], r["concurrency"]) for r in rows] == [("eagle3-2step", "1"), ("eagle3-2step", "4")]
    assert rows[0]["verdict"] == "faster"
    assert float(rows[0]["baseline_tok_s"]) == pytest.approx(101.0)


def test_it_searches_the_log_case_insensitively_with_the_same_paging(client, auth, run):
    make_log(run, [["ready", "Decode batch, a", "prefill"], ["DECODE batch, b", "x", "y"], ["z", "decode c"]])

    body = client.get(f"/api/runs/{run.pk}/log?q=decode&limit=2", headers=auth).json()
    rest = client.get(f"/api/runs/{run.pk}/log?q=decode&after={body['next']}", headers=auth).json()

    assert [line["n"] for line in body["lines"]] == [2, 4]
    assert body["next"] == 4
    assert [(line["n"], line["text"]) for line in rest["lines"]] == [(8, "decode c")]


def test_it_creates_configs_and_profiles_with_the_forms_validation(client, auth):
    config = {"name": "eagle3", "model_path": "/m/t", "speculative_algorithm": "EAGLE3",
              "speculative_draft_model_path": "/m/d", "speculative_num_steps": 2, "speculative_eagle_topk": 1,
              "speculative_num_draft_tokens": 3, "env": {"NCCL_PROTO": "LL"}}  # fmt: skip

    created = client.post("/api/configs", config, content_type="application/json", headers=auth)
    refused = client.post(
        "/api/configs", {**config, "speculative_num_draft_tokens": 5}, content_type="application/json", headers=auth
    )
    profile = client.post(
        "/api/profiles", {"name": "c1-4", "concurrency": [1, 4], "num_prompts": 8}, content_type="application/json",
        headers=auth,
    )  # fmt: skip
    nameless = client.post("/api/profiles", {"concurrency": [1]}, content_type="application/json", headers=auth)
    levelless = client.post(
        "/api/profiles", {"name": "p", "concurrency": [0]}, content_type="application/json", headers=auth
    )

    assert created.status_code == 201 and created.json()["env"] == {"NCCL_PROTO": "LL"}
    assert len(created.json()["content_hash"]) == 64
    # topk 1 runs steps + 1 draft tokens: a rule between fields, which no schema states.
    assert refused.status_code == 409 and "speculative_num_draft_tokens" in refused.json()["errors"]
    assert profile.status_code == 201 and profile.json()["concurrency"] == [1, 4]
    assert nameless.status_code == 422 and set(nameless.json()["errors"]) == {"name"}
    assert levelless.status_code == 422 and set(levelless.json()["errors"]) == {"concurrency"}
    listed = client.get("/api/configs", headers=auth).json()
    assert [c["name"] for c in listed] == ["eagle3"]
    assert [p["name"] for p in client.get("/api/profiles", headers=auth).json()] == ["c1-4"]


def test_it_registers_a_host_and_refuses_bad_input(client, auth, settings):
    settings.SPECDASH_HOST_ALLOWLIST = ("10.0.0.0/24",)
    make_ssh_key(name="id_ed25519")
    good = {"name": "gpu-1", "address": "10.0.0.5", "port": 22, "username": "ml", "key_name": "id_ed25519",
            "work_dir": "specdash-work", "launcher": "python3 -m sglang.launch_server", "python": "python3",
            "server_port": 30000}  # fmt: skip

    created = client.post("/api/hosts", good, content_type="application/json", headers=auth)
    bad = client.post(
        "/api/hosts", {**good, "name": "gpu-2", "key_name": "../id", "port": 70000}, content_type="application/json",
        headers=auth,
    )  # fmt: skip
    outside = client.post(
        "/api/hosts", {**good, "name": "gpu-3", "address": "10.0.1.5"}, content_type="application/json", headers=auth
    )

    assert created.status_code == 201 and created.json()["pinned"] is False
    assert created.json()["key_name"] == "id_ed25519"
    assert bad.status_code == 422 and set(bad.json()["errors"]) == {"key_name", "port"}
    assert outside.status_code == 422
    assert outside.json()["errors"]["address"] == [
        "10.0.1.5 (10.0.1.5) is not in SPECDASH_HOST_ALLOWLIST; an operator can add it there."
    ]


def test_it_reports_the_flags_of_an_experiment_in_the_api(client, owner):
    runs = make_history([88.8, 88.9, 88.7, 88.8, 88.6, 88.9, 88.8, 88.7, 88.8, 82.2, 82.3, 82.1])
    _, token = ApiToken.issue(owner)

    body = client.get(f"/api/experiments/{runs[9].experiment_id}", headers={"Authorization": f"Bearer {token}"}).json()

    assert [(f["direction"], f["concurrency"], f["triage"]) for f in body["flags"]] == [("regression", 1, "untriaged")]
    assert body["flags"][0]["change"] == pytest.approx(-0.074, abs=0.005)
    # The evidence: every series inside, the interval of the change and the run that confirmed it.
    flag = body["flags"][0]
    assert flag["confirmed_by_run"] == runs[10].pk
    before, after = runs[8].finished_at, runs[9].finished_at
    assert before is not None and after is not None
    assert (flag["changed_after"], flag["changed_by"]) == (before.isoformat(), after.isoformat())
    assert [(s["concurrency"], s["last_run_before"], s["first_run_after"]) for s in flag["series"]] == [
        (1, runs[8].pk, runs[9].pk)
    ]
    # What changed in the environment at that point (these runs have no fingerprint: nothing to compare).
    assert (flag["environment_change"]["before"], flag["environment_change"]["after"]) == (runs[8].pk, runs[9].pk)
    assert isinstance(flag["environment_change"]["summary"], str)
    # The suspicion that led to it, with the confirming run it queued in this experiment.
    [suspicion] = body["suspicions"]
    assert suspicion["state"] == "confirmed" and suspicion["run"] == runs[9].pk and suspicion["flag"] == flag["id"]
    assert len(suspicion["confirming_runs"]) == 1 and suspicion["series"][0]["state"] == "confirmed"


def test_it_pages_the_config_list_keeping_its_shape(client, auth, django_assert_max_num_queries):
    configs = [make_config(name=f"paged-{i}") for i in range(5)]  # newest last
    newest_first = [c.pk for c in reversed(configs)]

    with django_assert_max_num_queries(6):
        first = client.get("/api/configs", {"limit": 2}, headers=auth)
    second = client.get("/api/configs", {"limit": 2, "page": 2}, headers=auth)
    past = client.get("/api/configs", {"limit": 2, "page": 99}, headers=auth)

    assert [c["id"] for c in first.json()] == newest_first[:2]
    assert set(first.json()[0]) == set(client.get("/api/configs", headers=auth).json()[0])  # the same fields
    assert (first["X-Count"], first["X-Page"], first["X-Pages"]) == ("5", "1", "3")
    assert [c["id"] for c in second.json()] == newest_first[2:4] and second["X-Page"] == "2"
    assert [c["id"] for c in past.json()] == newest_first[4:] and past["X-Page"] == "3"
    assert client.get("/api/configs", headers=auth)["X-Pages"] == "1"  # 200 a page unless `limit` says
