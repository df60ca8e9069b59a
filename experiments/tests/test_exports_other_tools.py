"""An experiment in the formats other tools read (llm-d Benchmark Reports, bench_serving JSONL, MLflow and W&B
runs): the same bytes from the page, the API and `specdash export`; the llm-d reports valid under the schema; no
secret in any of them; and a bench_serving export imported back giving the same cells."""

from __future__ import annotations

import json

import jsonschema_rs
import pytest

from experiments.cli import credentials
from experiments.formats import imported_results
from experiments.models import ApiToken, Experiment, Measurement, Run
from experiments.reads.reports import build_report

from .cli_support import IN_PROCESS_URL
from .factories import (
    make_config,
    make_eagle_config,
    make_experiment,
    make_host,
    make_measurement,
    make_profile,
    make_run,
)

pytestmark = pytest.mark.django_db

KINDS = ("llm-d.json", "bench-serving.jsonl", "mlflow.json", "wandb.json")
SECRET = "hf_exportMustNeverShowThis0123456789"
API_KEY = "sk-server-reported-api-key-42"
LATENCIES = tuple(
    f"{stat}_{metric}"
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms")
    for stat in ("mean", "median", "p90", "p99")
)
# What a bench_serving line carries of a cell, each under the column it is stored in.
CELL_COLUMNS = (
    "concurrency",
    "pass_index",
    "completed",
    "duration_s",
    "output_throughput",
    "total_throughput",
    "request_throughput",
    "input_throughput",
    "server_accept_length",
    *LATENCIES,
)


def _cell_values(tok_s: float, speculative: bool, concurrency: int, pass_index: int) -> dict:
    values = {name: round(10.0 + i + concurrency + pass_index / 10, 3) for i, name in enumerate(LATENCIES)}
    values.update(
        duration_s=20.5 + pass_index,
        input_throughput=tok_s * 0.5,
        total_throughput=tok_s * 1.5,
        request_throughput=0.75 * concurrency,
    )
    if speculative:
        values.update(
            accept_length=2.4 + pass_index / 100,
            pooled_accept_length=2.41 + pass_index / 100,
            mean_request_accept_length=2.3,
            server_accept_length=2.38 + pass_index / 100,
        )
    return values


def _measured_experiment() -> Experiment:
    """A baseline and an EAGLE3 candidate holding HF_TOKEN, each measured at c=1 and 4 in two passes (and a failed
    run whose pass no export holds), their servers reporting SGLang 0.5.9 and an api_key."""
    host = make_host(name="gpu-8")
    baseline = make_config(name="baseline", extra_args=["--mem-fraction-static", "0.85"])
    candidate = make_eagle_config(name="eagle3 2-step", env={"HF_TOKEN": SECRET, "SGLANG_LOG_LEVEL": "info"})
    profile = make_profile(concurrency=[1, 4], passes=2, num_prompts=16, input_len=128, output_len=256)
    experiment = make_experiment(host=host, baseline=baseline, candidates=[candidate], profile=profile,
                                 with_runs=False, tags="nightly eagle3")  # fmt: skip
    reported = {"version": "0.5.9", "mem_fraction_static": 0.85, "api_key": API_KEY, "tp_size": 8}
    for config, tok_s in ((baseline, 100.0), (candidate, 150.0)):
        run = make_run(experiment=experiment, config=config, state=Run.State.SUCCEEDED, effective_args=reported)
        for pass_index in range(2):
            for concurrency in (1, 4):
                speed = tok_s * concurrency + pass_index
                values = _cell_values(speed, config == candidate, concurrency, pass_index)
                Measurement.objects.create(run=run, concurrency=concurrency, pass_index=pass_index, completed=16,
                                           output_throughput=speed, **values)  # fmt: skip
    failed = make_run(experiment=experiment, config=candidate, state=Run.State.FAILED)
    make_measurement(failed, concurrency=1, output_throughput=999.0)
    return experiment


def _bearer(user) -> dict:
    _, token = ApiToken.issue(user)
    return {"Authorization": f"Bearer {token}"}


# The downloads -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_it_hands_out_the_same_file_from_the_page_and_the_api(owner_client, client, owner, kind):
    experiment = _measured_experiment()

    page = owner_client.get(f"/experiments/{experiment.pk}/export.{kind}")
    api = client.get(f"/api/experiments/{experiment.pk}/export.{kind}", headers=_bearer(owner))

    assert page.status_code == api.status_code == 200
    assert page.content == api.content
    assert page["Content-Disposition"] == api["Content-Disposition"]
    assert page["Content-Disposition"] == f'attachment; filename="experiment-{experiment.pk}-{kind}"'


def test_the_page_links_each_format_in_a_fold_below_the_results(owner_client):
    experiment = _measured_experiment()

    page = owner_client.get(f"/experiments/{experiment.pk}/").content.decode()

    fold = page[page.index('id="export-formats"') :]
    for kind, anchor in zip(KINDS, ("llm-d", "bench-serving", "mlflow", "wandb"), strict=True):
        assert f'href="/experiments/{experiment.pk}/export.{kind}" id="export-{anchor}"' in fold
    assert page.index('id="export-csv"') < page.index('id="configs-card"') < page.index('id="export-formats"')


def test_an_unknown_format_is_not_found_and_a_viewer_may_export_but_not_an_outsider(client, viewer, outsider):
    experiment = _measured_experiment()
    client.force_login(viewer)

    assert client.get(f"/experiments/{experiment.pk}/export.xlsx").status_code == 404
    assert client.get(f"/experiments/{experiment.pk}/export.llm-d.json").status_code == 200
    client.force_login(outsider)
    assert client.get(f"/experiments/{experiment.pk}/export.llm-d.json").status_code == 403
    assert client.get("/api/experiments/999999/export.wandb.json", headers=_bearer(viewer)).status_code == 404


def test_specdash_export_writes_each_format(cli, cli_home, owner, tmp_path):
    experiment = _measured_experiment()
    _, token = ApiToken.issue(owner)
    credentials.save(IN_PROCESS_URL, token)

    lines = cli("export", str(experiment.pk), "--format", "bench-serving")
    written = cli("export", str(experiment.pk), "--format", "llm-d", "-o", str(tmp_path / "reports.json"))

    assert lines.code == written.code == 0, lines.err + written.err
    assert len(lines.out.splitlines()) == 8
    assert len(json.loads((tmp_path / "reports.json").read_text())) == 8
    for fmt in ("mlflow", "wandb"):
        result = cli("export", str(experiment.pk), "--format", fmt)
        assert result.code == 0 and json.loads(result.out)["runs"][0]["run_name" if fmt == "mlflow" else "name"]


@pytest.mark.parametrize("kind", KINDS)
def test_no_export_reveals_a_secret_nor_a_server_reported_key(owner_client, kind):
    experiment = _measured_experiment()

    text = owner_client.get(f"/experiments/{experiment.pk}/export.{kind}").content.decode()

    assert SECRET not in text and "hf_export" not in text
    assert API_KEY not in text and "api_key" not in text


# llm-d Benchmark Report ----------------------------------------------------------------------------------------------

# The parts of the llm-d Benchmark Report v0.2.1 that the export writes, transcribed field by field from
# llm-d/llm-d-benchmark llmdbenchmark/analysis/benchmark_report/br_v0_2_1_json_schema.json (commit 8bc9f1ddd873):
# each object's properties, required fields, `additionalProperties`, enums and minimums as the schema states them,
# and the units each metric accepts from schema_v0_2.py's `check_units` (base.py's UNITS_TIME, UNITS_GEN_LATENCY,
# UNITS_GEN_THROUGHPUT, UNITS_REQUEST_THROUGHPUT). The sub-objects the export never writes (session performance,
# time series, prefix, multi-turn) are left out, so writing one fails here until it is transcribed too.
_TEXT_OR_NULL = {"type": ["string", "null"]}
_INT_OR_NULL = {"type": ["integer", "null"]}
_NUMBER = {"type": ["number", "integer", "null"]}
_UNITS = ["count", "pixels", "percent", "fraction", "ratio", "ms", "s", "bytes", "MB", "GB", "TB", "MiB", "GiB",
          "TiB", "Mbit/s", "Gbit/s", "Tbit/s", "GiB/s", "MB/s", "GB/s", "TB/s", "ms/token", "s/token", "tokens/s",
          "queries/s", "images/s", "videos/s", "audios/s", "Watts"]  # fmt: skip


def _object(required: list[str], **properties) -> dict:
    return {"type": "object", "additionalProperties": False, "required": required, "properties": properties}


def _statistics(*units: str) -> dict:
    percentiles = ("mode", "min", "p0p1", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "p99p9", "max")
    return {
        "type": "object",
        "required": ["units", "mean"],
        "properties": {
            "units": {"enum": list(units)},
            "mean": {"type": "number"},
            "stddev": {"type": ["number", "null"], "minimum": 0},
            **dict.fromkeys(percentiles, _NUMBER),
        },
    }


_NATIVE = _object([], args={"type": ["object", "null"]}, envars={"type": ["object", "null"]}, config={})
_SEQUENCE_LENGTH = _object(
    ["distribution", "value"],
    distribution={"enum": ["fixed", "gaussian", "uniform", "other"]},
    value={"type": ["integer", "number"], "minimum": 0},
    std_dev={"type": ["number", "null"], "minimum": 0},
    min={"type": ["integer", "null"], "minimum": 0},
    max={"type": ["integer", "null"], "minimum": 1},
)
LLMD_REPORT_V0_2_1 = _object(
    ["run", "results"],
    version={"type": "string"},
    run=_object(
        ["uid"],
        uid={"type": "string"},
        eid=_TEXT_OR_NULL,
        cid=_TEXT_OR_NULL,
        pid=_TEXT_OR_NULL,
        time={
            "anyOf": [
                _object(
                    [],
                    start={"type": ["string", "null"], "format": "date-time"},
                    end={"type": ["string", "null"], "format": "date-time"},
                    duration=_TEXT_OR_NULL,
                ),
                {"type": "null"},
            ]
        },
        user=_TEXT_OR_NULL,
        description=_TEXT_OR_NULL,
        keywords={"type": ["array", "null"], "items": {"type": "string"}},
    ),
    scenario=_object(
        [],
        stack={
            "type": "array",
            "items": _object(
                ["metadata", "standardized", "native"],
                metadata=_object(
                    ["label", "cfg_id"],
                    schema_version={"type": "string"},
                    label={"type": "string"},
                    cfg_id={"type": "string"},
                    description=_TEXT_OR_NULL,
                ),
                standardized=_object(
                    ["kind", "tool", "tool_version", "role", "replicas", "model", "accelerator"],
                    kind={"const": "inference_engine"},
                    tool={"type": "string"},
                    tool_version={"type": "string"},
                    role={"enum": ["replica", "prefill", "decode"]},
                    replicas={"type": "integer", "minimum": 1},
                    model=_object(["name"], name={"type": "string"}),
                    accelerator=_object(
                        ["model", "count", "parallelism"],
                        model={"type": "string"},
                        count={"type": "integer", "minimum": 0},
                        parallelism=_object(
                            [],
                            tp={"type": "integer", "minimum": 0},
                            dp={"type": "integer", "minimum": 0},
                            dp_local={"type": "integer", "minimum": 0},
                            workers={"type": "integer", "minimum": 0},
                            ep={"type": "integer", "minimum": 1},
                            pp={"type": "integer", "minimum": 1},
                        ),
                    ),
                ),
                native=_NATIVE,
            ),
        },
        load=_object(
            ["metadata", "standardized", "native"],
            metadata=_object([], schema_version={"type": "string"}, cfg_id=_TEXT_OR_NULL, description=_TEXT_OR_NULL),
            standardized=_object(
                ["tool", "tool_version", "source", "input_seq_len"],
                tool={"type": "string"},
                tool_version={"type": "string"},
                parallelism={"type": "integer", "minimum": 1},
                source={"enum": ["random", "sampled", "unknown"]},
                stage={"type": "integer", "minimum": 0},
                input_seq_len=_SEQUENCE_LENGTH,
                output_seq_len={"anyOf": [_SEQUENCE_LENGTH, {"type": "null"}]},
                rate_qps={"type": ["number", "null"], "exclusiveMinimum": 0},
                concurrency={"type": ["integer", "null"], "minimum": 1},
            ),
            native=_NATIVE,
        ),
    ),
    results=_object(
        [],
        request_performance=_object(
            [],
            aggregate=_object(
                [],
                requests=_object(
                    ["total"],
                    total={"type": "integer", "minimum": 0},
                    failures={"type": ["integer", "null"], "minimum": 0},
                    incomplete=_INT_OR_NULL,
                    input_length=_statistics("count", "pixels"),
                    output_length=_statistics("count", "pixels"),
                ),
                latency=_object(
                    [],
                    time_to_first_token=_statistics("ms", "s"),
                    normalized_time_per_output_token=_statistics("ms/token", "s/token"),
                    time_per_output_token=_statistics("ms/token", "s/token"),
                    inter_token_latency=_statistics("ms/token", "s/token"),
                    request_latency=_statistics("ms", "s"),
                ),
                throughput=_object(
                    [],
                    input_token_rate=_statistics("tokens/s"),
                    output_token_rate=_statistics("tokens/s"),
                    total_token_rate=_statistics("tokens/s"),
                    request_rate=_statistics("queries/s"),
                ),
            ),
        ),
        observability={"type": "object", "additionalProperties": True},
    ),
)


def test_every_llmd_report_is_valid_under_the_schema_and_rejects_what_it_does_not_allow(owner_client):
    experiment = _measured_experiment()
    validator = jsonschema_rs.Draft202012Validator(LLMD_REPORT_V0_2_1)

    reports = owner_client.get(f"/experiments/{experiment.pk}/export.llm-d.json").json()

    assert len(reports) == 8  # two configs x two concurrencies x two passes; the failed run's pass is not there
    for report in reports:
        errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in validator.iter_errors(report)]
        assert errors == [], errors
    # The validator is strict where the schema is: an unknown field, a wrong unit, a missing uid.
    wrong = json.loads(json.dumps(reports[0]))
    wrong["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["units"] = "tokens/s"
    wrong["speculative"] = {}
    del wrong["run"]["uid"]
    assert len(list(validator.iter_errors(wrong))) == 3


def test_an_llmd_report_holds_the_cell_as_measured_and_the_speculative_extension(owner_client):
    experiment = _measured_experiment()
    comparison = {row.concurrency: row for row in build_report(experiment, with_figures=False).rows}

    reports = owner_client.get(f"/experiments/{experiment.pk}/export.llm-d.json").json()

    report = next(
        r for r in reports
        if r["scenario"]["stack"][0]["metadata"]["label"] == "eagle3 2-step"
        and r["scenario"]["load"]["standardized"]["concurrency"] == 4
        and r["results"]["observability"]["x-specdash"]["cell"]["pass"] == 1
    )  # fmt: skip
    measured = Measurement.objects.get(run__config__name="eagle3 2-step", run__state="succeeded", concurrency=4,
                                       pass_index=1)  # fmt: skip
    assert report["version"] == "0.2.1"
    assert len({r["run"]["uid"] for r in reports}) == 8 and len({r["run"]["eid"] for r in reports}) == 1
    aggregate = report["results"]["request_performance"]["aggregate"]
    assert aggregate["throughput"]["output_token_rate"] == {"units": "tokens/s", "mean": measured.output_throughput}
    assert aggregate["throughput"]["request_rate"] == {"units": "queries/s", "mean": 3.0}
    assert aggregate["latency"]["time_to_first_token"] == {
        "units": "ms",
        "mean": measured.mean_ttft_ms,
        "p50": measured.median_ttft_ms,
        "p90": measured.p90_ttft_ms,
        "p99": measured.p99_ttft_ms,
    }
    assert aggregate["latency"]["time_per_output_token"]["units"] == "ms/token"
    assert aggregate["requests"] == {"total": 16, "failures": 0}
    engine = report["scenario"]["stack"][0]
    assert engine["standardized"]["tool"] == "sglang" and engine["standardized"]["tool_version"] == "0.5.9"
    assert engine["standardized"]["accelerator"] == {
        "model": "NVIDIA H200",
        "count": 8,
        "parallelism": {"tp": 8, "dp": 1, "pp": 1},
    }
    assert engine["native"]["args"]["--speculative-algorithm"] == "EAGLE3"
    assert engine["native"]["envars"] == {"HF_TOKEN": "(hidden)", "SGLANG_LOG_LEVEL": "info"}
    assert report["run"]["keywords"] == ["nightly", "eagle3"] and report["run"]["time"]["duration"] == "PT21.5S"
    extension = report["results"]["observability"]["x-specdash"]
    assert extension["speculative"]["speculative_num_steps"] == 2
    assert extension["acceptance"]["accept_length"] == measured.accept_length
    assert extension["acceptance"]["server_accept_length"] == measured.server_accept_length
    row = comparison[4]
    assert extension["comparison"]["speedup"] == round(row.speedup, 4)
    assert extension["comparison"]["verdict"] == row.verdict and extension["comparison"]["baseline"] == "baseline"
    baseline_report = next(r for r in reports if r["scenario"]["stack"][0]["metadata"]["label"] == "baseline")
    assert baseline_report["results"]["observability"]["x-specdash"]["comparison"] is None
    assert baseline_report["scenario"]["stack"][0]["native"]["args"]["--mem-fraction-static"] == "0.85"


# bench_serving JSONL, and back ---------------------------------------------------------------------------------------


def test_the_bench_serving_lines_use_bench_servings_keys_and_server_info(owner_client):
    experiment = _measured_experiment()

    text = owner_client.get(f"/experiments/{experiment.pk}/export.bench-serving.jsonl").content.decode()

    lines = [json.loads(line) for line in text.splitlines()]
    assert imported_results.detect(text) == imported_results.SGLANG
    first = lines[0]
    assert first["backend"] == "sglang" and first["max_concurrency"] == 1 and first["request_rate"] == float("inf")
    assert (first["dataset_name"], first["random_input_len"], first["random_output_len"]) == ("random", 128, 256)
    assert first["total_output_tokens"] == round(first["output_throughput"] * first["duration"])
    assert first["server_info"]["model_path"] == "/models/kimi-k2.5-sim"
    assert first["server_info"]["speculative_algorithm"] is None and first["accept_length"] is None
    assert first["server_info"]["version"] == "0.5.9" and first["server_info"]["mem_fraction_static"] == 0.85
    eagle = next(line for line in lines if line["server_info"]["speculative_algorithm"] == "EAGLE3")
    assert eagle["server_info"]["speculative_num_draft_tokens"] == 3
    assert eagle["accept_length"] == eagle["server_info"]["internal_states"][0]["avg_spec_accept_length"] == 2.38
    assert eagle["specdash"]["accept_length"] == 2.4 and eagle["specdash"]["pooled_accept_length"] == 2.41
    assert {line["specdash"]["experiment"] for line in lines} == {experiment.pk}


def _import_back(client, user, experiment: Experiment) -> Experiment:
    text = client.get(f"/api/experiments/{experiment.pk}/export.bench-serving.jsonl", headers=_bearer(user))
    body = {
        "host": "gpu-8",
        "name": "round trip",
        "files": [{"name": "export.jsonl", "content": text.content.decode()}],
    }
    response = client.post("/api/imports", json.dumps(body), content_type="application/json", headers=_bearer(user))
    assert response.status_code == 201, response.json()
    return Experiment.objects.get(pk=response.json()["id"])


def _cells(experiment: Experiment, columns: tuple[str, ...]) -> dict[tuple, dict]:
    """Per (speculative algorithm, concurrency, pass) the cell's `columns`, of the experiment's usable passes."""
    rows = Measurement.objects.of_succeeded_runs().filter(run__experiment=experiment).select_related("run__config")
    return {
        (m.run.config.speculative_algorithm, m.concurrency, m.pass_index): {c: getattr(m, c) for c in columns}
        for m in rows
    }


def test_a_bench_serving_export_imports_back_as_the_same_cells(client, member):
    experiment = _measured_experiment()

    imported = _import_back(client, member, experiment)

    assert _cells(imported, CELL_COLUMNS) == _cells(experiment, CELL_COLUMNS)
    [candidate] = imported.ordered_candidates()
    assert imported.baseline.model_path == "/models/kimi-k2.5-sim" and imported.baseline.tp_size == 8
    assert (candidate.speculative_algorithm, candidate.speculative_num_steps, candidate.speculative_eagle_topk,
            candidate.speculative_num_draft_tokens) == ("EAGLE3", 2, 1, 3)  # fmt: skip
    assert imported.profile.concurrency == [1, 4] and imported.profile.passes == 2
    assert (imported.profile.input_len, imported.profile.output_len) == (128, 256)
    original = build_report(experiment, with_figures=False).rows
    again = build_report(imported, with_figures=False).rows
    assert [(r.concurrency, r.speedup, r.ci_low, r.ci_high) for r in again] == [
        (r.concurrency, r.speedup, r.ci_low, r.ci_high) for r in original
    ]


def test_specdashs_own_acceptance_figures_come_back_with_the_cells(client, member):
    """The token-weighted, pooled and mean-of-requests accept lengths travel under the line's `specdash` key (a
    bench_serving file has only the server's window): read back, the verdicts' acceptance rules see what they saw."""
    experiment = _measured_experiment()
    acceptance = ("accept_length", "pooled_accept_length", "mean_request_accept_length")

    imported = _import_back(client, member, experiment)

    assert _cells(imported, acceptance) == _cells(experiment, acceptance)


# Trackers ------------------------------------------------------------------------------------------------------------


def test_the_mlflow_runs_are_log_batch_bodies_one_run_per_config_by_concurrency(owner_client):
    experiment = _measured_experiment()
    report = build_report(experiment, with_figures=False)

    body = owner_client.get(f"/experiments/{experiment.pk}/export.mlflow.json").json()

    baseline, candidate = body["runs"]
    assert (baseline["run_name"], candidate["run_name"]) == ("baseline", "eagle3 2-step")
    [batch] = candidate["log_batches"]
    assert set(batch) == {"metrics", "params", "tags"}
    metrics = {(m["key"], m["step"]): m["value"] for m in batch["metrics"]}
    assert all(set(m) == {"key", "value", "timestamp", "step"} for m in batch["metrics"])
    [row] = [r for r in report.rows if r.concurrency == 4]
    assert metrics[("speedup", 4)] == round(row.speedup, 4)
    throughput = dict((c, mean) for c, mean, *_ in report.throughput_series["eagle3 2-step"])
    assert metrics[("output_throughput", 4)] == throughput[4] == 600.5
    params = {p["key"]: p["value"] for p in batch["params"]}
    assert params["speculative_algorithm"] == "EAGLE3" and params["profile.concurrency"] == "1, 4"
    assert all(isinstance(p["value"], str) and len(p["value"]) <= 500 for p in batch["params"])
    tags = {t["key"]: t["value"] for t in batch["tags"]}
    assert tags["mlflow.runName"] == "eagle3 2-step" and tags["specdash.verdict.c4"] == row.verdict
    assert "env" not in params and "HF_TOKEN" not in json.dumps(body)


def test_the_wandb_runs_hold_config_summary_and_history_by_concurrency(owner_client):
    experiment = _measured_experiment()

    body = owner_client.get(f"/experiments/{experiment.pk}/export.wandb.json").json()

    candidate = body["runs"][1]
    assert candidate["job_type"] == "candidate" and candidate["config"]["speculative_num_steps"] == 2
    assert candidate["config"]["profile"]["passes"] == 2 and candidate["tags"] == ["nightly", "eagle3"]
    assert candidate["summary"]["output_throughput/c1"] == 150.5 and candidate["summary"]["verdict/c4"]
    assert [row["concurrency"] for row in candidate["history"]] == [1, 4]
    assert candidate["history"][1]["speedup"] == candidate["summary"]["speedup/c4"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_cell_with_a_nan_exports_as_strict_json_without_it(owner_client, kind):
    experiment = _measured_experiment()
    Measurement.objects.filter(run__config__name="baseline", pass_index=0).update(
        mean_ttft_ms=float("nan"), input_throughput=float("nan")
    )

    response = owner_client.get(f"/experiments/{experiment.pk}/export.{kind}")

    assert response.status_code == 200
    text = response.content.decode().replace('"request_rate": Infinity', '"request_rate": null')

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the export")

    for line in text.splitlines() if kind.endswith("jsonl") else [text]:
        json.loads(line, parse_constant=refuse)
