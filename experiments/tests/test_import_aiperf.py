"""NVIDIA AIPerf exports imported (formats/imported_results/aiperf.py), on files AIPerf itself wrote: 0.13.0 and 0.3.0
from PyPI, run against the simulated host (simhost, SGLang 0.5.23 formats, EAGLE3, --enable-metrics):

    aiperf profile --model simhost/models/kimi-k2.5-sim --tokenizer simhost/models/kimi-k2.5-sim/tokenizer \
      --url http://127.0.0.1:31911 --endpoint-type chat --streaming --concurrency 4 --request-count 20 \
      --warmup-request-count 4 --prompt-input-tokens-mean 32 --prompt-input-tokens-stddev 0 \
      --prompt-output-tokens-mean 50 --prompt-output-tokens-stddev 0 --extra-inputs ignore_eos:true \
      --random-seed 7 --export-level records                                    (data/aiperf-0.13/)
    (0.3.0: --concurrency 2 --request-count 8 --warmup-request-count 2 --synthetic-input-tokens-mean 32
     --output-tokens-mean 40                                                    (data/aiperf-0.3/))

The per-request speculative fields that only vLLM reports (--per-request-spec-decode-metrics) are added field by
field as AIPerf 0.13 writes them: aiperf/metrics/types/spec_decode_metrics.py (tags, units "ratio", "count",
"tokens") and aiperf/common/models/record_models.py (MetricRecordInfo: `{metadata, metrics: {tag: {value, unit}}}`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.formats import imported_results
from experiments.formats.imported_results import ResultFileError, aiperf, parse, read_given
from experiments.models import ApiToken, Run

from .factories import make_host

DATA = Path(__file__).parent / "data"
NEW = {p.name: p.read_text() for p in (DATA / "aiperf-0.13").iterdir()}
OLD = {p.name: p.read_text() for p in (DATA / "aiperf-0.3").iterdir()}
SUMMARY, RECORDS = NEW["profile_export_aiperf.json"], NEW["profile_export.jsonl"]
CSV, SERVER = NEW["profile_export_aiperf.csv"], NEW["server_metrics_export.json"]
MODEL = "simhost/models/kimi-k2.5-sim"
EAGLE3 = {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "simhost/models/kimi-k2.5-sim-eagle3",
          "speculative_eagle_topk": 1}  # fmt: skip


def _given(**values):
    errors: list[str] = []
    given = read_given(values, errors)
    assert errors == []
    return given


def _errors(content, fmt=imported_results.AUTO, given=None) -> list[str]:
    with pytest.raises(ResultFileError) as caught:
        parse(content, fmt, given)
    return caught.value.errors


def _records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# Each file alone ----------------------------------------------------------------------------------------------------


def test_every_aiperf_file_is_told_by_its_own_keys():
    assert {name: aiperf.kind_of(text) for name, text in NEW.items()} == {
        "profile_export_aiperf.json": aiperf.SUMMARY,
        "profile_export.jsonl": aiperf.RECORDS,
        "profile_export_aiperf.csv": aiperf.CSV,
        "server_metrics_export.json": aiperf.SERVER_METRICS,
    }
    assert {imported_results.detect(text) for text in (*NEW.values(), *OLD.values())} == {imported_results.AIPERF}


def test_it_reads_an_aiperf_013_summary_by_specdash_names():
    file = json.loads(SUMMARY)

    [run] = parse(SUMMARY)

    assert (run.tool, run.version, run.engine) == ("aiperf", "0.13.0", "")
    assert run.server.model_path == MODEL and run.server.speculative == {}  # the summary does not say
    assert (run.dataset, run.input_len, run.output_len, run.num_prompts) == ("synthetic", 32, 50, 20)
    assert run.measured_at.startswith("2026-12-07T18:50:25") and "--concurrency 4" in run.command
    [cell] = run.cells
    assert cell.concurrency == 4  # input_config.phases[1].concurrency: the profiling phase's
    m = cell.metrics
    assert m["completed"] == 20 and m["failed"] == 0
    assert m["duration_s"] == file["benchmark_duration"]["avg"]
    assert m["output_throughput"] == file["output_token_throughput"]["avg"] == pytest.approx(288.41, abs=0.01)
    assert m["total_throughput"] == file["total_token_throughput"]["avg"]
    assert m["request_throughput"] == file["request_throughput"]["avg"]
    # AIPerf's inter token latency is specdash's TPOT; its inter chunk latency (a chunk carries the step's accepted
    # tokens, so about twice as long here) is specdash's ITL; its request latency the end-to-end one.
    assert m["mean_tpot_ms"] == file["inter_token_latency"]["avg"] == pytest.approx(13.19, abs=0.01)
    assert m["p99_tpot_ms"] == file["inter_token_latency"]["p99"]
    assert m["mean_itl_ms"] == file["inter_chunk_latency"]["avg"] == pytest.approx(26.53, abs=0.01)
    assert m["median_itl_ms"] == file["inter_chunk_latency"]["p50"]
    assert m["mean_e2e_latency_ms"] == file["request_latency"]["avg"] == pytest.approx(684.97, abs=0.01)
    assert m["median_ttft_ms"] == file["time_to_first_token"]["p50"]
    assert cell.raw["p95_tpot_ms"] == file["inter_token_latency"]["p95"]
    assert cell.raw["aiperf_time_to_second_token"] == file["time_to_second_token"]["avg"]
    assert "accept_length" not in m and "pooled_accept_length" not in m  # SGLang reports none per request


def test_it_reads_an_aiperf_03_summary_of_the_cli_config_and_without_a_total():
    file = json.loads(OLD["profile_export_aiperf.json"])
    assert "schema_version" not in file and "total_token_throughput" not in file

    [run] = parse(OLD["profile_export_aiperf.json"])

    assert run.version == "" and run.server.model_path == MODEL  # input_config.endpoint.model_names
    assert (run.input_len, run.output_len, run.num_prompts) == (32, 40, 8)  # input.prompt, request_count
    [cell] = run.cells
    assert cell.concurrency == 2  # input_config.loadgen.concurrency
    duration = file["benchmark_duration"]["avg"]
    # Its total is the output's and the input's throughput over the duration, as later versions write it.
    assert cell.metrics["total_throughput"] == pytest.approx(
        file["output_token_throughput"]["avg"] + file["total_isl"]["avg"] / duration
    )
    assert cell.metrics["mean_tpot_ms"] == file["inter_token_latency"]["avg"]


def test_the_per_request_export_leaves_out_its_warmup_and_gives_the_summary_s_figures():
    rows = _records(RECORDS)
    assert [r["metadata"]["benchmark_phase"] for r in rows].count("warmup") == 4
    file = json.loads(SUMMARY)

    [run] = parse(RECORDS, given={"model_path": MODEL, "concurrency": 4})

    [cell] = run.cells
    m = cell.metrics
    assert cell.raw["warmup_requests_dropped"] == 4
    assert m["completed"] == 20 and len(m["requests"]) == 20 and run.num_prompts == 20
    # The same requests give the summary's latency statistics (AIPerf's percentiles interpolate linearly too).
    pairs = (("tpot", "inter_token_latency"), ("itl", "inter_chunk_latency"), ("ttft", "time_to_first_token"),
             ("e2e_latency", "request_latency"))  # fmt: skip
    for ours, theirs in pairs:
        for stat, key in (("mean", "avg"), ("median", "p50"), ("p90", "p90"), ("p99", "p99")):
            assert m[f"{stat}_{ours}_ms"] == pytest.approx(file[theirs][key], rel=1e-9), (ours, stat)
    # First request sent to last answer: AIPerf's benchmark_duration; its throughputs are over the phase's span,
    # a few ms longer, which the records do not hold (within 0.2%).
    assert m["duration_s"] == pytest.approx(file["benchmark_duration"]["avg"], rel=1e-4)
    assert m["output_throughput"] == pytest.approx(file["output_token_throughput"]["avg"], rel=2e-3)
    first = next(r for r in rows if r["metadata"]["benchmark_phase"] == "profiling")
    assert m["requests"][0] == {
        "ok": True,
        "output_len": 50,
        "ttft_ms": first["metrics"]["time_to_first_token"]["value"],
        "tpot_ms": first["metrics"]["inter_token_latency"]["value"],
        "itl_ms": pytest.approx(sum(gaps := first["metrics"]["inter_chunk_latency"]["value"]) / len(gaps)),
        "e2e_latency_ms": first["metrics"]["request_latency"]["value"],
    }


def test_the_csv_reads_as_the_summary_to_its_two_decimals():
    [run] = parse(CSV, given={"model_path": MODEL, "concurrency": 4})

    [cell] = run.cells
    assert cell.metrics["output_throughput"] == 288.41 and cell.metrics["total_throughput"] == 473.0
    assert cell.metrics["mean_tpot_ms"] == 13.19 and cell.metrics["mean_itl_ms"] == 26.53
    assert cell.metrics["p99_e2e_latency_ms"] == 818.31 and cell.metrics["duration_s"] == 3.46
    assert cell.metrics["completed"] == 20 and (run.input_len, run.output_len) == (32, 50)


def test_the_pooled_accept_length_is_the_counters_and_the_gauge_mean_keeps_its_own_name():
    file = json.loads(SERVER)
    metrics = file["metrics"]
    tokens = metrics["sglang:generation_tokens"]["series"][0]["stats"]["total"]  # AIPerf drops "_total"
    steps = metrics["sglang:spec_verify_calls"]["series"][0]["stats"]["total"]
    gauge = metrics["sglang:spec_accept_length"]["series"][0]["stats"]["avg"]

    run = aiperf.read_run([("profile_export_aiperf.json", SUMMARY), ("server_metrics_export.json", SERVER)],
                          _given(**EAGLE3))  # fmt: skip

    [cell] = run.cells
    assert (tokens, steps) == (1000.0, 487.0)
    assert cell.metrics["pooled_accept_length"] == tokens / steps == pytest.approx(2.053, abs=0.001)
    # AIPerf's "Accept Length" is the gauge's mean, zeros before the first decode included: not the pooled figure.
    assert cell.raw["sglang_spec_accept_length_gauge_mean"] == gauge == pytest.approx(1.844, abs=0.001)
    assert cell.metrics["server_mean_e2e_latency_ms"] == pytest.approx(
        metrics["sglang:e2e_request_latency_seconds"]["series"][0]["stats"]["avg"] * 1000
    )
    # The server's gauges say its steps and draft tokens; its metric names say the engine.
    assert run.server.speculative == {**EAGLE3, "speculative_num_steps": 2, "speculative_num_draft_tokens": 3}
    assert run.engine == "sglang"


# Several files of one run -------------------------------------------------------------------------------------------


def test_the_files_of_one_benchmark_are_found_together_summary_first():
    names = ["server_metrics_export.json", "profile_export.jsonl", "profile_export_aiperf.json", "other.jsonl"]
    texts = [SERVER, RECORDS, SUMMARY, '{"completed": 1}']

    assert aiperf.groups(texts) == [[2, 1, 0]], names
    # Two benchmarks in one upload: each summary with its own server metrics; the records name neither, and stay out.
    other_summary = json.dumps({**json.loads(SUMMARY), "benchmark_id": "b2"})
    other_server = json.dumps({**json.loads(SERVER), "benchmark_id": "b2"})
    assert aiperf.groups([SUMMARY, SERVER, other_summary, other_server, RECORDS]) == [[0, 1], [2, 3]]


def test_the_files_of_one_benchmark_become_one_run_with_the_requests_and_the_pooled_acceptance():
    files = [("profile_export_aiperf.json", SUMMARY), ("profile_export.jsonl", RECORDS),
             ("server_metrics_export.json", SERVER)]  # fmt: skip

    run = aiperf.read_run(files, _given(**EAGLE3))

    [cell] = run.cells
    [alone] = parse(SUMMARY)
    assert {k: v for k, v in cell.metrics.items() if k in alone.cells[0].metrics} == alone.cells[0].metrics
    assert len(cell.metrics["requests"]) == 20 and cell.raw["warmup_requests_dropped"] == 4
    assert cell.metrics["pooled_accept_length"] == pytest.approx(1000 / 487)
    assert cell.raw["aiperf_files"] == "profile_export_aiperf.json + profile_export.jsonl + server_metrics_export.json"


def test_files_of_two_benchmarks_are_refused_as_one_run():
    other = json.dumps({**json.loads(SERVER), "benchmark_id": "b2"})

    with pytest.raises(ResultFileError) as caught:
        aiperf.read_run([("a.json", SUMMARY), ("s.json", other)], _given(**EAGLE3))

    assert caught.value.errors == ["benchmark_id: the files are of different AIPerf runs (3575f95a684f, b2)"]


def test_records_of_another_run_are_refused_by_their_count():
    rows = RECORDS.splitlines()[:-1]  # one profiling request fewer than the summary counts

    with pytest.raises(ResultFileError, match=r"profile_export.jsonl: 19 profiling requests, where .* counts 20"):
        aiperf.read_run([("s.json", SUMMARY), ("profile_export.jsonl", "\n".join(rows))], _given())


# Refusals: the file's kind, the line, the field and what to add -----------------------------------------------------


def test_a_server_metrics_export_alone_says_what_to_add():
    assert _errors(SERVER) == [
        "line 1: metrics: an AIPerf server-metrics export (server_metrics_export.json) holds the server's counters, "
        "not the client's measurements: import it together with the run's profile_export_aiperf.json (or "
        "profile_export.jsonl)"
    ]


def test_a_speculating_server_needs_its_algorithm_stated():
    with pytest.raises(ResultFileError) as caught:
        aiperf.read_run([("s.json", SUMMARY), ("m.json", SERVER)], _given())

    [message] = caught.value.errors
    assert message.startswith("line 1: metrics.sglang:spec_verify_calls: the server speculated")
    assert "`speculative_algorithm` / --speculative-algorithm" in message


def test_the_gauges_give_steps_and_draft_tokens_but_the_topk_must_be_stated():
    without_topk = {k: v for k, v in EAGLE3.items() if k != "speculative_eagle_topk"}

    with pytest.raises(ResultFileError) as caught:
        aiperf.read_run([("s.json", SUMMARY), ("m.json", SERVER)], _given(**without_topk))

    assert caught.value.errors == [
        "line 1: metrics.sglang:spec_num_steps: the server's gauges give its steps 2, draft tokens 3, not its draft "
        "tree's topk: state it with `speculative_eagle_topk` / --topk"
    ]


def test_the_records_and_the_csv_say_which_given_fields_to_add():
    assert _errors(RECORDS) == [
        "line 1: model_path: an AIPerf per-request export (profile_export.jsonl) does not name the model: state the "
        "served model's path with `model_path` / --model",
        "line 1: concurrency: an AIPerf per-request export (profile_export.jsonl) does not hold it: state the "
        "concurrency the client ran at with `concurrency` / --concurrency",
    ]


def _summary_with(**changes):
    row = json.loads(SUMMARY)
    row.update(changes)
    return json.dumps({k: v for k, v in row.items() if v is not None})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (_summary_with(output_token_throughput=None), "line 1: output_token_throughput: missing"),
        (_summary_with(benchmark_duration={"unit": "min", "avg": 1}), "line 1: benchmark_duration.unit: 'min' is not"),
        (_summary_with(request_latency={"unit": "ms", "avg": -1}), "line 1: request_latency.avg: negative"),
        (_summary_with(request_throughput={"unit": "tokens/sec", "avg": 1}), "line 1: request_throughput.unit:"),
        (_summary_with(was_cancelled=True), "line 1: was_cancelled: the benchmark did not finish"),
        (_summary_with(request_count={"unit": "requests", "avg": 2.5}), "line 1: request_count.avg: not a whole"),
        (
            _summary_with(phases=None, input_config={"models": {"items": [{"name": "a"}, {"name": "b"}]}}),
            "line 1: input_config.models: 2 models",
        ),
        (
            RECORDS.replace('"time_to_first_token":{"value":', '"time_to_first_token":{"value":"x","was":', 5),
            "line 5: metrics.time_to_first_token.value: not a number",
        ),
        (RECORDS + "\n{not json\n", "line 26: not JSON"),
    ],
)
def test_a_malformed_aiperf_file_is_refused_by_line_and_field(content, message):
    errors = _errors(content, given={"model_path": MODEL, "concurrency": 4})

    assert any(e.startswith(message) for e in errors), errors


# vLLM's per-request acceptance, where AIPerf 0.13 writes it ---------------------------------------------------------


def _with_vllm_acceptance(records: str) -> str:
    """Each profiling record with the spec_decode_* metrics AIPerf derives from vLLM's per-request payload: request
    i took 10 + i verify steps and accepted 2 drafts a step."""
    out = []
    for i, row in enumerate(_records(records)):
        steps, accepted = 10 + i, 2 * (10 + i)
        row["metrics"].update(
            spec_decode_steps={"value": steps, "unit": "count"},
            spec_decode_accepted_draft_tokens={"value": accepted, "unit": "tokens"},
            spec_decode_acceptance_length={"value": 1 + accepted / steps if i % 2 else 2.5, "unit": "ratio"},
        )
        out.append(json.dumps(row))
    return "\n".join(out)


def test_vllm_s_per_request_acceptance_is_token_weighted_and_the_requests_mean():
    summary = _summary_with(
        spec_decode_token_weighted_acceptance_length={"unit": "ratio", "avg": 3.0},
        spec_decode_acceptance_length={"unit": "ratio", "avg": 2.75, "p50": 2.75},
    )
    [from_summary] = parse(summary)
    [from_records] = parse(_with_vllm_acceptance(RECORDS), given={"model_path": MODEL, "concurrency": 4})

    assert from_summary.cells[0].metrics["accept_length"] == 3.0
    assert from_summary.cells[0].metrics["mean_request_accept_length"] == 2.75
    # 1 + accepted / steps over the profiling requests; the mean of their own lengths, half 3.0 and half 2.5.
    assert from_records.cells[0].metrics["accept_length"] == pytest.approx(3.0)
    assert from_records.cells[0].metrics["mean_request_accept_length"] == pytest.approx(2.75)


# Other tools' files, and AIPerf's, are called by their tool's name ---------------------------------------------------


def test_an_aiperf_file_read_as_another_format_is_named_not_refused_in_that_format_s_terms():
    assert _errors(SUMMARY, imported_results.VLLM) == [
        "line 1: this is an AIPerf summary (profile_export_aiperf.json), not a vllm-bench-serve file: leave the "
        "format to auto"
    ]
    [message] = _errors(RECORDS, imported_results.SGLANG)
    assert "AIPerf per-request export (profile_export.jsonl)" in message and "server_info" not in message


OTHER_FILES = [
    (
        "an llm-d benchmark report (schema 0.2)",
        "version: '0.2'\nrun:\n  uid: x\nscenario:\n  stack: []\nresults:\n  a: 1\n",
    ),
    ("an llm-d benchmark report (schema 0.1)", json.dumps({"version": "0.1", "scenario": {}, "metrics": {}})),
    ("an MLflow run", json.dumps({"run": {"info": {"run_id": "abc"}, "data": {"metrics": []}}})),
    ("an MLflow run (meta.yaml)", "artifact_uri: file:///m\nexperiment_id: '1'\nlifecycle_stage: active\nrun_id: a\n"),
    ("a Weights & Biases run summary", json.dumps({"_runtime": 12, "_timestamp": 1.7e9, "_step": 3, "tps": 1})),
    ("an LLMPerf summary", json.dumps({"num_concurrent_requests": 4, "results_ttft_s_mean": 0.1, "model": "m"})),
    ("LLMPerf per-request results", json.dumps([{"ttft_s": 0.1, "end_to_end_latency_s": 1.0, "error_code": None}])),
    ("an inference-perf report", json.dumps({"load_summary": {"count": 1}, "successes": {}, "failures": {}})),
    (
        "a vllm bench throughput result",
        json.dumps(
            {
                "elapsed_time": 1,
                "num_requests": 2,
                "total_num_tokens": 3,
                "requests_per_second": 2,
                "tokens_per_second": 3,
            }
        ),
    ),
    ("a vllm bench latency result", json.dumps({"avg_latency": 1.0, "latencies": [1.0], "percentiles": {}})),
    (
        "an SGLang bench_one_batch_server result",
        json.dumps(
            {"run_name": "x", "batch_size": 1, "input_len": 8, "output_len": 8, "latency": 1, "overall_throughput": 1}
        ),
    ),
    ("an AIPerf raw request export", json.dumps({"metadata": {"request_start_ns": 1}, "payload": {}}) + "\n"),
    ("an AIPerf inputs file", json.dumps({"data": [{"session_id": "s", "payloads": []}]})),
    ("an AIPerf timeslice export", json.dumps({"timeslices": [], "input_config": {}})),
    ("an AIPerf phase manifest", json.dumps({"phases": [{"metrics_json": "p.json"}], "schema_version": 1})),
    ("an AIPerf server-metrics time series", json.dumps({"endpoint_url": "u", "timestamp_ns": 1, "metrics": {}})),
]


@pytest.mark.parametrize(("name", "content"), OTHER_FILES, ids=[name for name, _ in OTHER_FILES])
def test_a_file_of_a_tool_specdash_does_not_import_is_called_by_the_tool_s_name(name, content):
    assert imported_results.detect(content) == imported_results.OTHER_TOOL

    [message] = _errors(content)

    assert message.startswith(f"line 1: this is {name}") and "which specdash does not import: " in message
    assert "server_info" not in message and "model_id" not in message  # never another tool's terms


def test_the_readers_files_are_not_taken_for_another_tool_s():
    for name in ("bench_serving_baseline.jsonl", "bench_serving_eagle3.jsonl", "vllm_bench_serve.json",
                 "specforge_benchmark.json"):  # fmt: skip
        assert imported_results.detect((DATA / name).read_text()) != imported_results.OTHER_TOOL, name


# Through the API ----------------------------------------------------------------------------------------------------


def _post(client, user, body):
    _, token = ApiToken.issue(user)
    return client.post(
        "/api/imports", json.dumps(body), content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )


@pytest.mark.django_db
def test_the_files_of_one_aiperf_run_uploaded_together_are_one_imported_run(client, member):
    make_host(name="gpu-8")
    # The simulated host served its model by a relative path; a host's configs name absolute ones under its root.
    moved = {name: text.replace(MODEL, "/models/kimi-k2.5-sim") for name, text in NEW.items()}
    files: list[dict[str, object]] = [{"name": name, "content": moved[name]} for name in
             ("server_metrics_export.json", "profile_export.jsonl", "profile_export_aiperf.json")]  # fmt: skip
    files[2]["given"] = {**EAGLE3, "speculative_draft_model_path": "/models/kimi-eagle3"}

    response = _post(client, member, {"host": "gpu-8", "files": files})

    assert response.status_code == 201, response.json()
    [run] = Run.objects.filter(pk__in=[r["id"] for r in response.json()["runs"]])
    assert run.imported_from is not None and run.imported_from["file"] == "profile_export_aiperf.json"
    assert run.imported_from["tool"] == "aiperf"
    assert run.config.model_path == "/models/kimi-k2.5-sim" and run.config.speculative_algorithm == "EAGLE3"
    assert run.config.speculative_num_steps == 2 and run.config.speculative_num_draft_tokens == 3
    [cell] = run.measurement_set.all()
    assert cell.concurrency == 4 and cell.completed == 20
    assert cell.output_throughput == json.loads(SUMMARY)["output_token_throughput"]["avg"]
    assert cell.pooled_accept_length == pytest.approx(1000 / 487) and len(cell.requests) == 20
    assert cell.raw["warmup_requests_dropped"] == 4 and cell.raw["sglang_spec_accept_length_gauge_mean"] > 1.8


@pytest.mark.django_db
def test_an_aiperf_server_metrics_export_alone_is_refused_naming_the_file(client, member):
    make_host(name="gpu-8")

    response = _post(client, member, {"host": "gpu-8", "files": [{"name": "sm.json", "content": SERVER}]})

    assert response.status_code == 400
    [message] = response.json()["errors"]["files[0]"]
    assert message.startswith("sm.json: line 1: metrics: an AIPerf server-metrics export") and not Run.objects.exists()
