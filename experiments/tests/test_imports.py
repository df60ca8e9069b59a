"""Importing result files made outside specdash: the readers on the repository's hand-checked files (bench_serving
JSONL lines with their server_info, a vllm bench serve JSON), malformed files refused by line and field, the API
(runs usable by the comparison, nothing written on an error, roles), the pages and `specdash import`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.cli import credentials
from experiments.formats import imported_results
from experiments.formats.imported_results import ResultFileError, parse
from experiments.models import ApiToken, AuditEvent, Experiment, Measurement, Run, ServerConfig
from experiments.reads.reports import build_report

from .cli_support import IN_PROCESS_URL
from .factories import make_experiment, make_host

DATA = Path(__file__).parent / "data"
BASELINE = (DATA / "bench_serving_baseline.jsonl").read_text()
EAGLE3 = (DATA / "bench_serving_eagle3.jsonl").read_text()
VLLM = (DATA / "vllm_bench_serve.json").read_text()


def _line(text: str, n: int = 0) -> dict:
    return json.loads(text.splitlines()[n])


def _with(text: str, n: int, **changes) -> str:
    lines = text.splitlines()
    row = json.loads(lines[n])
    row.update(changes)
    lines[n] = json.dumps(row)
    return "\n".join(lines) + "\n"


# The readers (pure) -------------------------------------------------------------------------------------------------


def test_it_reads_bench_serving_lines_with_their_server_info():
    [run] = parse(EAGLE3)

    assert run.tool == "sglang bench_serving" and run.version == "0.5.9"
    assert run.server.model_path == "/models/kimi-k2.5-sim" and run.server.tp_size == 8
    assert run.server.speculative == {
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "/models/kimi-k2.5-sim-eagle3",
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 3,
    }
    assert (run.dataset, run.input_len, run.output_len, run.num_prompts) == ("random", 128, 128, 16)
    one, four = run.cells
    # 2048 output tokens in 20.48 s and 6.4 s; 16 requests; input + output tokens over the duration.
    assert (one.concurrency, one.line, four.concurrency, four.line) == (1, 1, 4, 2)
    assert one.metrics["output_throughput"] == 100.0 and four.metrics["output_throughput"] == 320.0
    assert one.metrics["request_throughput"] == 0.78125 and one.metrics["total_throughput"] == 200.0
    assert one.metrics["input_throughput"] == 100.0 and one.metrics["duration_s"] == 20.48
    # bench_serving's accept_length is the server's window (internal_states[0].avg_spec_accept_length), stored as
    # that; the requests' token-weighted figure is not in the file.
    assert one.metrics["completed"] == 16 and one.metrics.get("accept_length") is None
    assert one.metrics["server_accept_length"] == 2.41
    assert one.metrics["median_ttft_ms"] == 35.28 and one.metrics["p90_tpot_ms"] == 10.56
    assert one.metrics["p99_e2e_latency_ms"] == 1631.76  # the file's, as bench_serving wrote it
    # No column for std and p95: kept raw, as is what the tool adds; the infinite request rate is no JSON.
    assert one.raw["std_ttft_ms"] == 1.8 and one.raw["p95_itl_ms"] == 26.57 and one.raw["concurrency"] == 0.97
    assert "request_rate" not in one.raw and "server_info" not in one.raw
    assert run.server_args["speculative_num_steps"] == 2 and "internal_states" not in run.server_args


def test_it_reads_a_baseline_server_as_no_speculation():
    [run] = parse(BASELINE)

    assert run.server.speculative == {}
    assert [c.metrics["output_throughput"] for c in run.cells] == [80.0, 256.0]
    assert run.cells[0].metrics.get("accept_length") is None and run.cells[0].metrics["server_accept_length"] is None


def test_it_reads_a_vllm_bench_serve_json():
    assert imported_results.detect(VLLM) == imported_results.VLLM
    [run] = parse(VLLM)

    [cell] = run.cells
    assert run.tool == "vllm bench serve" and run.server.model_path == "/models/kimi-k2.5-sim"
    assert (run.input_len, run.output_len, run.num_prompts) == (256, 128, 32)  # from the token totals
    assert cell.concurrency == 4 and cell.metrics["output_throughput"] == 256.0
    assert cell.metrics["total_throughput"] == 768.0 and cell.metrics["failed"] == 0
    # spec_decode_acceptance_length is 1 + accepted / drafts from the server's counters: the pooled figure.
    assert cell.metrics["pooled_accept_length"] == 2.41 and cell.metrics.get("accept_length") is None
    assert cell.metrics["p90_e2e_latency_ms"] == 2030.5 and cell.metrics["median_e2e_latency_ms"] == 1920.0
    assert cell.raw["spec_decode_acceptance_rate"] == 70.5 and cell.raw["std_itl_ms"] == 3.1


def test_lines_of_two_servers_become_two_runs_and_a_repeated_concurrency_a_second_pass():
    [baseline, eagle] = parse(BASELINE + EAGLE3 + EAGLE3.splitlines()[0] + "\n")

    assert baseline.server.speculative == {} and [c.concurrency for c in eagle.cells] == [1, 4, 1]
    assert [c.line for c in eagle.cells] == [3, 4, 5]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (_with(BASELINE, 1, output_throughput="fast"), "line 2: output_throughput: not a number"),
        (_with(BASELINE, 0, duration=None), "line 1: duration: missing"),
        (_with(BASELINE, 0, completed=3.5), "line 1: completed: not a whole number of at least 0"),
        (
            _with(BASELINE, 0, max_concurrency=None),
            "line 1: max_concurrency: null (the run had no concurrency limit): "
            "state the concurrency the client ran at with `concurrency`",
        ),
        (_with(BASELINE, 1, median_ttft_ms=-1), "line 2: median_ttft_ms: negative"),
        (_with(BASELINE, 0, accept_length=True), "line 1: accept_length: not a number"),
        (
            _with(BASELINE, 0, server_info=None),
            "line 1: server_info: null (backend sglang): state the served model's path with `model_path` / --model",
        ),
        (
            _with(BASELINE, 0, server_info={"tp_size": 1}),
            "line 1: server_info.model_path: missing from server_info: state the served model's path with `model_path`",
        ),
        (BASELINE + "{not json\n", "line 3: not JSON"),
        (BASELINE + "[1, 2]\n", "line 3: not a JSON object"),
        ("\n\n", "the file holds no result line"),
    ],
)
def test_a_malformed_bench_serving_file_is_refused_naming_the_line_and_field(content, message):
    with pytest.raises(ResultFileError) as caught:
        parse(content)

    assert any(error.startswith(message) for error in caught.value.errors), caught.value.errors


def test_a_malformed_vllm_file_is_refused_naming_the_field():
    row = json.loads(VLLM)
    row["output_throughput"] = "NaN"
    del row["total_token_throughput"]

    with pytest.raises(ResultFileError) as caught:
        parse(json.dumps(row), imported_results.VLLM)

    assert caught.value.errors == ["line 1: output_throughput: not a number"]
    del row["output_throughput"]
    row["output_throughput"] = 1.0
    with pytest.raises(ResultFileError, match="total_token_throughput: missing"):
        parse(json.dumps(row), imported_results.VLLM)


# The API ------------------------------------------------------------------------------------------------------------


def _post(client, user, body):
    _, token = ApiToken.issue(user)
    return client.post(
        "/api/imports", json.dumps(body), content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )


def _files(*pairs):
    return [{"name": name, "content": content} for name, content in pairs]


@pytest.mark.django_db
def test_it_imports_a_baseline_and_a_speculative_file_into_one_comparable_experiment(client, member):
    host = make_host(name="gpu-8")

    response = _post(
        client,
        member,
        {
            "host": "gpu-8",
            "name": "eagle3 from the archive",
            "files": _files(("base.jsonl", BASELINE), ("eagle.jsonl", EAGLE3)),
        },
    )

    assert response.status_code == 201, response.json()
    body = response.json()
    experiment = Experiment.objects.get(pk=body["id"])
    assert experiment.name == "eagle3 from the archive" and experiment.host == host
    assert not experiment.baseline.is_speculative
    [candidate] = experiment.ordered_candidates()
    assert candidate.speculative_algorithm == "EAGLE3" and candidate.speculative_num_steps == 2
    assert experiment.profile.concurrency == [1, 4] and experiment.profile.input_len == 128
    runs = list(experiment.run_set.order_by("sequence"))
    assert [r.state for r in runs] == [Run.State.SUCCEEDED] * 2
    assert runs[1].imported_from is not None
    assert (
        runs[1].imported_from.items()
        >= {
            "file": "eagle.jsonl",
            "format": "sglang-bench-serving",
            "tool": "sglang bench_serving",
            "version": "0.5.9",
            "engine": "sglang",
            "command": "",
            "lines": [1, 2],
            "given": [],
        }.items()
    )
    assert runs[1].imported_label == "imported from eagle.jsonl (sglang bench_serving 0.5.9)"
    assert runs[1].effective_args["speculative_eagle_topk"] == 1
    assert not Run.objects.queued().exists()  # nothing for a worker to take

    # The comparison reads them as any succeeded runs: 100 / 80 and 320 / 256 tok/s.
    rows = {row["concurrency"]: row for row in client_get(client, member, experiment.pk)["comparison"]}
    assert rows[1]["speedup"] == pytest.approx(1.25) and rows[4]["speedup"] == pytest.approx(1.25)
    assert rows[1]["candidate"] == candidate.name
    assert Measurement.objects.of_succeeded_runs().filter(run__experiment=experiment).count() == 4
    event = AuditEvent.objects.get(action=AuditEvent.Action.IMPORT)
    assert event.target_id == experiment.pk and event.detail["files"] == ["base.jsonl", "eagle.jsonl"]
    assert event.actor == member


def client_get(client, user, experiment_id):
    _, token = ApiToken.issue(user)
    return client.get(f"/api/experiments/{experiment_id}", headers={"Authorization": f"Bearer {token}"}).json()


@pytest.mark.django_db
def test_the_report_compares_imported_measurements(client, member):
    make_host(name="gpu-8")
    body = _post(client, member, {"host": "gpu-8", "files": _files(("b.jsonl", BASELINE), ("e.jsonl", EAGLE3))}).json()
    experiment = Experiment.objects.get(pk=body["id"])

    report = build_report(experiment, with_figures=False)  # its rows are analysis.compare_configs's

    assert report.status == "finished"
    assert [(row.concurrency, round(row.speedup, 3)) for row in report.rows] == [(1, 1.25), (4, 1.25)]


@pytest.mark.django_db
def test_it_imports_into_an_existing_experiment_reusing_a_config_of_the_same_content(client, owner):
    make_host(name="gpu-8")
    first = _post(client, owner, {"host": "gpu-8", "files": _files(("b.jsonl", BASELINE))}).json()
    configs = ServerConfig.objects.count()

    # Another night of the same server (other bytes): its runs join the experiment.
    again = _post(
        client, owner, {"experiment": first["id"], "files": _files(("b2.jsonl", _with(BASELINE, 0, duration=20.5)))}
    )

    assert again.status_code == 201 and again.json()["id"] == first["id"]
    assert ServerConfig.objects.count() == configs  # same content hash: the same config
    runs = Run.objects.filter(experiment_id=first["id"]).order_by("sequence")
    assert [(r.sequence, r.launch_index) for r in runs] == [(0, 0), (1, 1)]


@pytest.mark.django_db
def test_a_bad_second_file_is_refused_by_line_and_field_and_nothing_is_written(client, member):
    make_host(name="gpu-8")
    before = (
        Experiment.objects.count(),
        Run.objects.count(),
        ServerConfig.objects.count(),
        Measurement.objects.count(),
    )
    bad = _with(EAGLE3, 1, output_throughput="fast")

    response = _post(client, member, {"host": "gpu-8", "files": _files(("b.jsonl", BASELINE), ("e.jsonl", bad))})

    assert response.status_code == 400  # a file's text no schema states, as a body that is not JSON
    assert response.json()["errors"] == {"files[1]": ["e.jsonl: line 2: output_throughput: not a number"]}
    after = (Experiment.objects.count(), Run.objects.count(), ServerConfig.objects.count(), Measurement.objects.count())
    assert after == before and not AuditEvent.objects.filter(action=AuditEvent.Action.IMPORT).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ({"files": [{"name": "b.jsonl", "content": "{}"}]}, "host", 422),
        # Names that name nothing: 404, the field first in the detail.
        ({"host": "nowhere", "files": [{"name": "b.jsonl", "content": BASELINE}]}, "host", 404),
        ({"experiment": 999999, "files": [{"name": "b.jsonl", "content": BASELINE}]}, "experiment", 404),
        ({"host": "gpu-8", "files": []}, "files", 422),
        ({"host": "gpu-8", "files": [{"name": "b.jsonl", "format": "csv", "content": BASELINE}]}, "files[0]", 422),
        ({"host": "gpu-8", "files": [{"name": "b.jsonl", "content": "x" * 2_000_001}]}, "files[0]", 422),
    ],
)
def test_a_bad_request_is_refused_with_the_field(client, member, body, field, status):
    make_host(name="gpu-8")

    response = _post(client, member, body)

    answer = response.json()
    assert response.status_code == status, answer
    assert field in answer.get("errors", {}) or answer["detail"].startswith(f"{field}: "), answer
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_viewer_may_not_import_nor_a_member_into_someone_elses_experiment(client, viewer, member):
    make_host(name="gpu-8")
    theirs = make_experiment(with_runs=False)

    as_viewer = _post(client, viewer, {"host": "gpu-8", "files": _files(("b.jsonl", BASELINE))})
    into_theirs = _post(client, member, {"experiment": theirs.pk, "files": _files(("b.jsonl", BASELINE))})

    assert as_viewer.status_code == 403 and into_theirs.status_code == 403
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_pages_say_a_run_was_imported_and_show_no_live_log(client, member):
    make_host(name="gpu-8")
    body = _post(client, member, {"host": "gpu-8", "files": _files(("vllm.json", VLLM))}).json()
    client.force_login(member)
    run_id = body["runs"][0]["id"]

    run_page = client.get(f"/runs/{run_id}/").content.decode()
    experiment_page = client.get(f"/experiments/{body['id']}/").content.decode()
    api_run = client.get(f"/api/runs/{run_id}").json()

    assert "imported from vllm.json (vllm bench serve)" in run_page and 'id="log-section"' not in run_page
    assert "imported from vllm.json (vllm bench serve)" in experiment_page
    assert api_run["imported_from"]["tool"] == "vllm bench serve"
    assert api_run["measurements"][0]["output_throughput"] == 256.0
    # Filed under the engine that served it: a vLLM config, as vLLM names its settings.
    assert Run.objects.get(pk=run_id).config.engine == "vllm"


# The command --------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_specdash_import_posts_the_files_and_exits_2_on_a_malformed_one(cli, owner, tmp_path):
    _, token = ApiToken.issue(owner)
    credentials.save(IN_PROCESS_URL, token)
    make_host(name="gpu-8")
    good, bad = tmp_path / "base.jsonl", tmp_path / "eagle.jsonl"
    good.write_text(BASELINE)
    bad.write_text(_with(EAGLE3, 0, duration="long"))

    refused = cli("import", str(good), str(bad), "--host", "gpu-8")
    bad.write_text(EAGLE3)
    done = cli("import", str(good), str(bad), "--host", "gpu-8", "--name", "archive", "--json")

    assert refused.code == 2 and "files[1]: eagle.jsonl: line 1: duration: not a number" in refused.err
    assert done.code == 0, done.err
    result = json.loads(done.out)
    assert [r["imported_from"]["file"] for r in result["runs"]] == ["base.jsonl", "eagle.jsonl"]
    assert Experiment.objects.get().name == "archive" and Run.objects.count() == 2
    good.write_text(_with(BASELINE, 0, duration=20.5))  # another night's file
    text = cli("import", str(good), "--experiment", str(result["id"]))
    assert text.code == 0 and f"into experiment {result['id']}" in text.out and "base.jsonl" in text.out
    same = cli("import", str(good), "--experiment", str(result["id"]))
    assert same.code == 0 and "Skipped base.jsonl: imported before as run(s)" in same.out and Run.objects.count() == 3


# SpecForge: a file without its model or concurrency, which the importer states ----------------------------------------

SPECFORGE = (DATA / "specforge_benchmark.json").read_text()
SPECFORGE_SERVER = {"model_path": "/models/kimi", "concurrency": 4, "tp_size": 8, "speculative_algorithm": "EAGLE3",
                    "speculative_draft_model_path": "/models/kimi-eagle3", "speculative_num_steps": 3}  # fmt: skip


def test_it_reads_a_specforge_benchmark_with_the_model_and_concurrency_stated():
    (run,) = parse(SPECFORGE, imported_results.SPECFORGE, SPECFORGE_SERVER)

    assert run.tool == "specforge benchmark" and run.dataset == "mt-bench" and run.num_prompts == 80
    assert run.server.model_path == "/models/kimi" and run.server.tp_size == 8
    assert run.server.speculative == {"speculative_algorithm": "EAGLE3",
                                      "speculative_draft_model_path": "/models/kimi-eagle3",
                                      "speculative_num_steps": 3}  # fmt: skip
    (cell,) = run.cells
    assert cell.concurrency == 4 and run.output_len == 512  # 40960 tokens / 80 samples
    assert cell.metrics["output_throughput"] == 320.0 and cell.metrics["request_throughput"] == 80 / 128.0
    # Token-weighted (40960 / 13653 = 3.0), not the file's unweighted mean of requests (2.9), which is kept raw.
    assert round(cell.metrics["accept_length"], 3) == 3.0 and cell.raw["average_acceptance_length"] == 2.9
    assert cell.metrics["mean_request_accept_length"] == 2.9  # under its own definition


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"concurrency": 4},
            "given.model_path: a SpecForge benchmark file does not name its model: state the served "
            "model's path with `model_path` / --model",
        ),
        ({"model_path": "/m"}, "concurrency: a SpecForge benchmark file does not hold it: state the concurrency"),
        ({"model_path": "/m", "concurrency": 0}, "given.concurrency: a whole number of at least 1"),
        ({"model_path": "/m", "concurrency": 4, "trust_remote_code": True}, "trust_remote_code: not something"),
        ({"model_path": "/m", "concurrency": 4, "speculative_num_steps": "3; rm"}, "speculative_num_steps: a whole"),
    ],
)
def test_a_specforge_file_without_what_it_lacks_stated_is_refused_naming_it(given, message):
    with pytest.raises(ResultFileError) as refused:
        parse(SPECFORGE, imported_results.SPECFORGE, given)
    assert any(message in error for error in refused.value.errors), refused.value.errors
    with pytest.raises(ResultFileError, match="latency_seconds: missing"):
        parse(json.dumps({"samples": 3, "throughput_tokens_per_second": 1.0}), imported_results.SPECFORGE, given)


@pytest.mark.django_db
def test_specdash_import_files_a_specforge_result_with_its_benchmark_flags(cli, owner, tmp_path):
    _, token = ApiToken.issue(owner)
    credentials.save(IN_PROCESS_URL, token)
    make_host(name="gpu-8")
    path = tmp_path / "specforge.json"
    path.write_text(SPECFORGE)
    flags = ["--format", "specforge-benchmark", "--host", "gpu-8", "--json"]

    refused = cli("import", str(path), *flags)
    stated = ["--model", "/models/kimi", "--concurrency", "4", "--tp-size", "8", "--speculative-algorithm", "EAGLE3",
              "--draft-model", "/models/kimi-eagle3", "--num-steps", "3"]  # fmt: skip
    partial = cli("import", str(path), *flags, *stated)  # as a submitted config: steps, topk, draft tokens together
    done = cli("import", str(path), *flags, *stated, "--topk", "1", "--num-draft-tokens", "4")

    assert refused.code == 2 and "given.model_path: a SpecForge benchmark file does not name its model" in refused.err
    together = "files[0].speculative_eagle_topk: specforge.json: Set steps, topk and draft tokens together"
    assert partial.code == 2 and together in partial.err
    assert done.code == 0, done.err
    (run,) = json.loads(done.out)["runs"]
    stored = Run.objects.get(pk=run["id"])
    assert stored.imported_from is not None and stored.imported_from["tool"] == "specforge benchmark"
    assert stored.config.speculative_algorithm == "EAGLE3" and stored.config.tp_size == 8
    assert Measurement.objects.get(run=stored).concurrency == 4


# Imports under the config policy ------------------------------------------------------------------------------------

SPECFORGE_GIVEN = {"model_path": "/models/kimi", "concurrency": 4, "tp_size": 8, "speculative_algorithm": "EAGLE3",
                   "speculative_draft_model_path": "/models/kimi-eagle3", "speculative_num_steps": 3,
                   "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}  # fmt: skip


def _specforge(**given):
    return [{"name": "sf.json", "format": "specforge-benchmark", "content": SPECFORGE,
             "given": {**SPECFORGE_GIVEN, **given}}]  # fmt: skip


def _nothing_written():
    return (Experiment.objects.count(), Run.objects.count(), ServerConfig.objects.count(), Measurement.objects.count())


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("given", "field", "message", "status"),
    [
        # Each once reached a stored config (and, through "Profile this run", a host's queue).
        ({"model_path": "/etc/passwd"}, "model_path", "Model path /etc/passwd is not under the host's models root "
                                                      "/models.", 404),
        ({"speculative_draft_model_path": "/models/../etc"}, "speculative_draft_model_path",
         "Draft model path must be written plainly", 404),
        ({"speculative_algorithm": "EAGLE3 --trust-remote-code"}, "speculative_algorithm", "Select a valid choice",
         422),
        ({"model_path": "/models/kimi\x00"}, "model_path", "Null characters are not allowed.", 422),
        ({"model_path": "/models/kimi\n--trust-remote-code"}, "model_path", "must not contain control characters",
         422),
        ({"tp_size": 2**31 - 1}, "tp_size", "TP size must be between 1 and 64.", 422),
        ({"tp_size": 16}, "tp_size", "has 8 GPUs, fewer than tp 16", 409),
        ({"speculative_num_draft_tokens": 9}, "speculative_num_draft_tokens", "SGLang forces draft tokens", 409),
    ],
)  # fmt: skip
def test_an_imported_specforge_config_goes_through_the_config_policy(client, member, given, field, message, status):
    make_host(name="gpu-8")
    before = _nothing_written()

    response = _post(client, member, {"host": "gpu-8", "files": _specforge(**given)})

    assert response.status_code == status, response.json()
    errors = response.json()["errors"]
    assert any(message in m for m in errors[f"files[0].{field}"]), errors
    assert all(m.startswith("sf.json: ") and f"(the file's given.{field})" in m for m in errors[f"files[0].{field}"])
    assert _nothing_written() == before and not AuditEvent.objects.filter(action=AuditEvent.Action.IMPORT).exists()


@pytest.mark.django_db
def test_every_import_format_goes_through_the_config_policy(client, owner):
    host = make_host(name="gpu-8")
    experiment = make_experiment(host=host, created_by=owner)
    sglang = _with(BASELINE, 0, server_info={**_line(BASELINE)["server_info"], "model_path": "/etc/passwd"})
    vllm = json.dumps({**json.loads(VLLM), "model_id": "/etc/passwd"})
    eagle = _with(EAGLE3, 0, server_info={**_line(EAGLE3)["server_info"], "speculative_algorithm": "eagle3 --x"})
    before = _nothing_written()

    # Into a new experiment on the host and into an existing one (its host): each file's config is checked.
    new = _post(client, owner, {"host": "gpu-8", "files": _files(("b.jsonl", sglang), ("v.json", vllm))})
    into = _post(client, owner, {"experiment": experiment.pk, "files": _files(("e.jsonl", eagle))})

    assert new.status_code == 404 and into.status_code == 422
    assert new.json()["errors"] == {
        "files[0].model_path": ["b.jsonl: Model path /etc/passwd is not under the host's models root /models. "
                                "(the file's server_info.model_path)"],
        "files[1].model_path": ["v.json: Model path /etc/passwd is not under the host's models root /models. "
                                "(the file's model_id)"],
    }  # fmt: skip
    (message,) = into.json()["errors"]["files[0].speculative_algorithm"]
    assert message.startswith("e.jsonl: Select a valid choice. EAGLE3 --X is not one of the available choices.")
    assert _nothing_written() == before


@pytest.mark.django_db
def test_an_imported_config_is_stored_as_the_form_cleans_it(client, member):
    make_host(name="gpu-8")

    response = _post(client, member, {"host": "gpu-8", "files": _specforge(model_path="  /models/kimi  ")})

    assert response.status_code == 201, response.json()
    config = Run.objects.get(pk=response.json()["runs"][0]["id"]).config
    assert config.model_path == "/models/kimi" and config.name == "kimi eagle3 s3 k1 d4 tp8"
    assert (config.speculative_eagle_topk, config.speculative_num_draft_tokens) == (1, 4)


@pytest.mark.django_db
def test_profile_this_run_refuses_an_imported_config_that_may_not_launch_there(client, member):
    # A config imported before imports were checked (or one the host's rules have since refused).
    host = make_host(name="gpu-8")
    config = ServerConfig.objects.create(name="passwd", model_path="/etc/passwd", tp_size=2**31 - 1,
                                         speculative_algorithm="EAGLE3 --trust-r")  # fmt: skip
    experiment = make_experiment(host=host, baseline=config, with_runs=False)
    run = Run.objects.create(experiment=experiment, config=config, host=host, state=Run.State.SUCCEEDED, sequence=0,
                             imported_from={"file": "sf.json"})  # fmt: skip
    _, token = ApiToken.issue(member)
    client.force_login(member)
    experiments = Experiment.objects.count()

    api = client.post(f"/api/runs/{run.pk}/profile", headers={"Authorization": f"Bearer {token}"})
    page = client.post(f"/runs/{run.pk}/profile/", follow=True)

    assert api.status_code == 409
    errors = api.json()["errors"]
    assert "Model path /etc/passwd is not under the host's models root /models." in errors["config.model_path"]
    assert "TP size must be between 1 and 64." in errors["config.tp_size"]
    assert any("Select a valid choice" in m for m in errors["config.speculative_algorithm"])
    assert "passwd may not be launched on gpu-8: " in page.content.decode()
    assert Experiment.objects.count() == experiments and not Run.objects.filter(profile_requested=True).exists()


@pytest.mark.django_db
def test_profile_this_run_queues_an_imported_config_that_may_launch(client, member):
    make_host(name="gpu-8")
    (run,) = _post(client, member, {"host": "gpu-8", "files": _specforge()}).json()["runs"]
    _, token = ApiToken.issue(member)

    response = client.post(f"/api/runs/{run['id']}/profile", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 201, response.json()
    assert Run.objects.get(profile_requested=True).config_id == run["config_id"]
