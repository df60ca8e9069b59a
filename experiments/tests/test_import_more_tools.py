"""Result files of SpecForge's legacy bench_eagle3, GuideLLM and genai-bench: GuideLLM 0.8.1 and genai-bench 0.0.5
files written by the tools themselves against the simulated host (tests/data, see each test), other versions built
field by field from the tool's source (cited per test); what maps to a cell is read, the rest refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.cli import credentials
from experiments.formats import imported_results
from experiments.formats.imported_results import ResultFileError, detect, parse
from experiments.models import ApiToken, Experiment, Measurement

from .cli_support import IN_PROCESS_URL
from .factories import make_host
from .test_imports import _files, _post

DATA = Path(__file__).parent / "data"
MODEL = {"model_path": "/models/llama"}


def _refusals(content: str, given: dict | None = None) -> list[str]:
    with pytest.raises(ResultFileError) as refused:
        parse(content, given=given)
    return refused.value.errors


# SpecForge bench_eagle3 ------------------------------------------------------------------------------------------


def _bench_eagle3(with_model: bool = True) -> dict:
    """sgl-project/SpecForge benchmarks/bench_eagle3.py `main` (72337ef0, 2025-11, to 34c67a01, 2026-01, which added
    "model": the draft's path): per benchmark a list of dict(batch_size, steps, topk, num_draft_tokens,
    metrics=[asdict(BenchmarkMetrics)], num_samples); benchmarker/utils.py BenchmarkMetrics(latency,
    output_throughput, accept_length, accuracy, num_questions, num_valid_predictions, categorical_performance)."""

    def entry(batch: int, steps: int, latency: float, accept: float) -> dict:
        metric = {"latency": latency, "output_throughput": 20480 / latency, "accept_length": accept,
                  "accuracy": 0.81, "num_questions": 80, "num_valid_predictions": 80,
                  "categorical_performance": None}  # fmt: skip
        topk, draft_tokens = (1, steps + 1) if steps else (0, 0)
        return {"batch_size": batch, "steps": steps, "topk": topk, "num_draft_tokens": draft_tokens,
                "metrics": [metric], "num_samples": 80}  # fmt: skip

    results: dict = {"model": "/models/llama-eagle3"} if with_model else {}
    results["mtbench"] = [entry(1, 0, 160.0, 1.0), entry(1, 3, 64.0, 3.2)]
    results["gsm8k"] = [entry(1, 0, 120.0, 1.0)]
    return results


def test_bench_eagle3_results_are_a_profile_per_benchmark_and_a_run_per_server():
    content = json.dumps(_bench_eagle3(), indent=4)

    assert detect(content) == imported_results.SPECFORGE_BENCH_EAGLE3
    base, eagle3, gsm8k = parse(content, given=MODEL)

    assert (base.tool, base.dataset, eagle3.dataset, gsm8k.dataset) == ("specforge bench_eagle3", "mtbench",
                                                                         "mtbench", "gsm8k")  # fmt: skip
    assert base.server.speculative == {} and base.server.model_path == "/models/llama"
    assert eagle3.server.speculative == {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path":
                                         "/models/llama-eagle3", "speculative_num_steps": 3,
                                         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}  # fmt: skip
    (cell,) = eagle3.cells
    assert cell.concurrency == 1 and cell.metrics["output_throughput"] == 320.0 and cell.metrics["duration_s"] == 64.0
    assert cell.metrics["accept_length"] == 3.2 and base.cells[0].metrics["accept_length"] is None
    assert cell.metrics["request_throughput"] == 80 / 64.0 and eagle3.output_len == 256 and cell.raw["accuracy"] == 0.81


def test_bench_eagle3_refuses_what_it_cannot_say_naming_what_to_add():
    older = _bench_eagle3(with_model=False)  # before 34c67a01: no draft path in the file

    (_, eagle3, _) = parse(json.dumps(older), given=MODEL | {"speculative_draft_model_path": "/models/d"})
    assert eagle3.server.speculative["speculative_draft_model_path"] == "/models/d"
    assert (
        _refusals(json.dumps(older))
        == [
            "line 1: given.model_path: a SpecForge bench_eagle3 file names the draft model, not the target: state the "
            "served model's path with `model_path` / --model"
        ]
        * 3
    )
    skipped = _bench_eagle3()
    skipped["gsm8k"][0] |= {"steps": None, "topk": None, "num_draft_tokens": None}  # --skip-launch-server
    assert _refusals(json.dumps(skipped), MODEL)[0].startswith(
        "line 1: gsm8k[0].steps: null (run with --skip-launch-server): the file does not say how the server speculated"
    )
    skipped["mtbench"][1]["metrics"][0]["latency"] = 0
    assert "line 1: mtbench[1].metrics[0].latency: zero: no throughput can be read" in _refusals(
        json.dumps(skipped), MODEL
    )


def test_a_bench_eagle3_answers_file_is_refused_naming_the_results_file_beside_it():
    # bench_eagle3.py and benchmarker/base.py at SpecForge 86c528b8: one line per question, the entry's settings
    # (record_extras) then run, index, question, outputs, prediction, label.
    line = {"benchmark": "gsm8k", "batch_size": 1, "steps": 3, "topk": 1, "num_draft_tokens": 4, "temperature": 0.0,
            "reasoning_effort": None, "enable_thinking": None, "run": 0, "index": 0, "question": {"question": "2+2?"},
            "outputs": {"answer": "4"}, "prediction": "4", "label": "4"}  # fmt: skip
    content = json.dumps(line) + "\n" + json.dumps(line | {"index": 1}) + "\n"

    assert detect(content) == imported_results.SPECFORGE_BENCH_EAGLE3
    assert _refusals(content, MODEL) == [
        "line 1: a SpecForge bench_eagle3 answers file (results_<time>_answers.jsonl): the answer to each prompt, no "
        "timings; import the results_<time>.jsonl written beside it"
    ]


# GuideLLM ---------------------------------------------------------------------------------------------------------

# Written by GuideLLM 0.8.1 (PyPI) against simhost (EAGLE3, tp 8): `guidellm run --backend kind=openai_http,
# target=...,model=simhost/models/kimi-k2.5-sim --profile kind=concurrent,streams=1 --override profile.streams 1,4
# --constraint kind=max_requests,count=16 --data kind=synthetic_text,prompt_tokens=32,output_tokens=32 --output
# kind=json`; and the same with --profile kind=constant,rate=4, --constraint count=8.
GUIDELLM = (DATA / "guidellm_0.8.1_concurrent.json").read_text()
GUIDELLM_RATE = (DATA / "guidellm_0.8.1_constant.json").read_text()


def test_it_reads_a_guidellm_report_of_concurrent_benchmarks_written_by_guidellm():
    assert detect(GUIDELLM) == imported_results.GUIDELLM
    (run,) = parse(GUIDELLM)

    assert (run.tool, run.version, run.server.model_path) == ("GuideLLM", "0.8.1", "simhost/models/kimi-k2.5-sim")
    assert (run.dataset, run.input_len, run.output_len, run.num_prompts) == ("synthetic_text", 32, 32, 16)
    one, four = run.cells
    assert (one.concurrency, four.concurrency) == (1, 4)
    report = json.loads(GUIDELLM)["benchmarks"][1]
    metrics = report["metrics"]
    # What GuideLLM's console prints: the rates' total means, the latencies of the successful requests.
    assert four.metrics["output_throughput"] == metrics["output_tokens_per_second"]["total"]["mean"]
    assert four.metrics["output_throughput"] == pytest.approx(
        metrics["output_token_count"]["successful"]["total_sum"] / report["duration"]
    )
    assert four.metrics["duration_s"] == report["duration"] and four.metrics["completed"] == 16
    assert four.metrics["mean_tpot_ms"] == metrics["inter_token_latency_ms"]["successful"]["mean"]  # the naming trap
    assert four.metrics["p99_ttft_ms"] == metrics["time_to_first_token_ms"]["successful"]["percentiles"]["p99"]
    assert four.metrics["median_e2e_latency_ms"] == metrics["request_latency"]["successful"]["median"] * 1000
    assert four.metrics.get("mean_itl_ms") is None  # GuideLLM times no gap between chunks
    assert four.raw["mean_time_per_output_token_with_first_ms"] > four.metrics["mean_tpot_ms"]


def test_a_guidellm_benchmark_at_a_request_rate_is_refused_by_its_rate():
    assert _refusals(GUIDELLM_RATE) == [
        "line 1: benchmarks[0].config.strategy.type_: a constant benchmark at 4 requests/s: specdash's cells are "
        "concurrencies, and GuideLLM held none; import a report of --profile concurrent (or synchronous) benchmarks"
    ]


def _guidellm_0_3() -> dict:
    """vllm-project/guidellm v0.3.0 src/guidellm/benchmark/output.py GenerativeBenchmarksReport(benchmarks) and
    benchmark.py GenerativeBenchmark: args.strategy, worker.backend_model, top-level request_totals, duration (a
    computed field), metrics of StatusDistributionSummary (successful/errored/incomplete/total, percentiles)."""

    def summary(mean: float) -> dict:
        part = {"mean": mean, "median": mean, "std_dev": 0.0, "count": 8, "total_sum": mean * 8,
                "percentiles": {"p90": mean * 1.1, "p99": mean * 1.2}}  # fmt: skip
        return {"successful": part, "errored": part, "incomplete": part, "total": part}

    def benchmark(strategy: dict) -> dict:
        metrics = {name: summary(mean) for name, mean in (("requests_per_second", 2.0), ("request_latency", 1.5),
                   ("output_tokens_per_second", 250.0), ("tokens_per_second", 500.0), ("prompt_token_count", 128),
                   ("output_token_count", 128), ("time_to_first_token_ms", 40.0), ("inter_token_latency_ms", 11.0),
                   ("time_per_output_token_ms", 11.3))}  # fmt: skip
        return {"type_": "generative_benchmark", "args": {"strategy": strategy}, "worker": {"backend_model":
                "/models/llama"}, "request_totals": {"successful": 8, "errored": 0, "incomplete": 1, "total": 9},
                "start_time": 100.0, "end_time": 104.0, "duration": 4.0, "metrics": metrics}  # fmt: skip

    return {"benchmarks": [benchmark({"type_": "synchronous"}), benchmark({"type_": "concurrent", "streams": 8})]}


def test_it_reads_a_guidellm_0_3_report_and_refuses_an_unbounded_throughput_run():
    report = _guidellm_0_3()

    (run,) = parse(json.dumps(report))

    assert run.server.model_path == "/models/llama" and [c.concurrency for c in run.cells] == [1, 8]
    cell = run.cells[1]
    assert (cell.metrics["output_throughput"], cell.metrics["input_throughput"]) == (250.0, 250.0)
    assert cell.metrics["mean_e2e_latency_ms"] == 1500.0 and cell.raw["incomplete"] == 1
    report["benchmarks"][1]["args"]["strategy"] = {"type_": "throughput", "max_concurrency": None}
    assert _refusals(json.dumps(report))[0].startswith(
        "line 1: benchmarks[1].args.strategy.max_concurrency: a throughput benchmark with no concurrency bound"
    )


def test_a_guidellm_yaml_report_is_refused_saying_how_to_get_the_json():
    yaml = "benchmarks:\n- config:\n    strategy:\n      type_: concurrent\n  type_: generative_benchmark\n"

    assert detect(yaml) == imported_results.GUIDELLM
    assert _refusals(yaml)[0].startswith("line 1: a GuideLLM YAML report: import its JSON instead")


# genai-bench ------------------------------------------------------------------------------------------------------

# Written by genai-bench 0.0.5 (PyPI) against simhost: `genai-bench benchmark --api-backend sglang --task
# text-to-text --traffic-scenario "D(32,32)" --num-concurrency 1 --num-concurrency 4 --max-requests-per-run 16
# --max-time-per-run 1`: two run files and the experiment's metadata (its paths made relative).
GENAI_C4 = (DATA / "genai_bench_0.0.5_D32_32_num_concurrency_4.json").read_text()
GENAI_C1 = (DATA / "genai_bench_0.0.5_D32_32_num_concurrency_1.json").read_text()
GENAI_META = (DATA / "genai_bench_0.0.5_experiment_metadata.json").read_text()


def test_it_reads_a_genai_bench_run_file_written_by_genai_bench_with_the_model_stated():
    assert detect(GENAI_C4) == imported_results.GENAI_BENCH
    (run,) = parse(GENAI_C4, given={"model_path": "simhost/models/kimi-k2.5-sim", "engine": "sglang"})

    aggregated = json.loads(GENAI_C4)["aggregated_metrics"]
    (cell,) = run.cells
    assert (run.tool, run.engine, run.dataset, run.input_len, run.output_len) == ("genai-bench", "sglang",
                                                                                   "D(32,32)", 32, 32)  # fmt: skip
    assert cell.concurrency == 4 and cell.metrics["completed"] == aggregated["num_completed_requests"]
    assert cell.metrics["output_throughput"] == aggregated["mean_output_throughput_tokens_per_s"]
    assert cell.metrics["total_throughput"] == aggregated["mean_total_tokens_throughput_tokens_per_s"]
    assert cell.metrics["duration_s"] == aggregated["run_duration"]
    assert cell.metrics["p90_ttft_ms"] == pytest.approx(aggregated["stats"]["ttft"]["p90"] * 1000)  # seconds in file
    assert cell.metrics["median_tpot_ms"] == pytest.approx(aggregated["stats"]["tpot"]["p50"] * 1000)
    assert cell.metrics.get("mean_itl_ms") is None and "requests" not in cell.metrics


def test_a_genai_bench_file_refuses_what_does_not_map_naming_it():
    assert _refusals(GENAI_C1) == [
        "line 1: given.model_path: a genai-bench run file does not name its model: state the served model's path "
        "with `model_path` / --model"
    ]
    assert _refusals(GENAI_META, MODEL)[0].startswith(
        "line 1: a genai-bench experiment_metadata.json holds the experiment's settings, not its results"
    )
    # genai_bench/metrics/metrics.py AggregatedMetrics: iteration_type "batch_size" for embedding tasks.
    row = json.loads(GENAI_C1)
    row["aggregated_metrics"]["iteration_type"] = "batch_size"
    assert "a run by batch size (an embedding task)" in _refusals(json.dumps(row), MODEL)[0]


def test_a_genai_bench_file_in_milliseconds_or_from_before_0_0_3_is_read_in_its_unit():
    # 0.0.3 on: `_time_unit` "ms" converts the latency stats (time_units.py TimeUnitConverter); 0.0.1-0.0.2 write no
    # `_time_unit` and seconds (aggregated_metrics_collector.py `save` at v0.0.1).
    row = json.loads(GENAI_C1)
    seconds = row["aggregated_metrics"]["stats"]["e2e_latency"]["mean"]
    older = {k: v for k, v in json.loads(GENAI_C1).items() if k != "_time_unit"}
    row["_time_unit"] = "ms"
    row["aggregated_metrics"]["stats"]["e2e_latency"]["mean"] = seconds * 1000

    ((in_ms,), (older_run,)) = (parse(json.dumps(row), given=MODEL)[0].cells, parse(json.dumps(older), given=MODEL))

    assert in_ms.metrics["mean_e2e_latency_ms"] == pytest.approx(seconds * 1000)
    assert older_run.cells[0].metrics["mean_e2e_latency_ms"] == pytest.approx(seconds * 1000)


# Through the API --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_api_imports_a_guidellm_report_and_genai_bench_runs_with_what_they_do_not_say(client, member):
    make_host(name="gpu-8")
    stated = {"model_path": "/models/kimi-k2.5-sim", "engine": "sglang", "tp_size": 8}
    # GuideLLM names the model the server was asked for: here simhost's relative path, which no host's models root
    # holds (a config under the host's policy is refused so); the served model's absolute path instead.
    served = GUIDELLM.replace('"simhost/models/kimi-k2.5-sim"', '"/models/kimi-k2.5-sim"')

    guidellm = _post(client, member, {"host": "gpu-8", "files": _files(("benchmarks.json", served))})
    genai = _post(client, member, {"host": "gpu-8", "files": [{"name": "c4.json", "content": GENAI_C4,
                                                               "given": stated}]})  # fmt: skip

    assert guidellm.status_code == 201, guidellm.json()
    assert genai.status_code == 201, genai.json()
    experiment = Experiment.objects.get(pk=guidellm.json()["id"])
    cells = Measurement.objects.filter(run__experiment=experiment).order_by("concurrency")
    report = json.loads(GUIDELLM)["benchmarks"]
    assert [(m.concurrency, m.output_throughput) for m in cells] == [
        (1, report[0]["metrics"]["output_tokens_per_second"]["total"]["mean"]),
        (4, report[1]["metrics"]["output_tokens_per_second"]["total"]["mean"]),
    ]
    (measured,) = Measurement.objects.filter(run__experiment_id=genai.json()["id"])
    assert measured.concurrency == 4 and measured.run.config.tp_size == 8
    refused = _post(client, member, {"host": "gpu-8", "files": _files(("c1.json", GENAI_C1))})
    assert refused.status_code == 400 and "state the served model's path" in str(refused.json())


@pytest.mark.django_db
def test_specdash_import_takes_each_format_by_name_with_the_model_stated(cli, owner, tmp_path):
    _, token = ApiToken.issue(owner)
    credentials.save(IN_PROCESS_URL, token)
    make_host(name="gpu-8")
    path = tmp_path / "D32_32_text-to-text_num_concurrency_1_time_6s.json"
    path.write_text(GENAI_C1)
    flags = ["--host", "gpu-8", "--json", "--format", "genai-bench-run"]

    refused = cli("import", str(path), *flags)
    done = cli("import", str(path), *flags, "--model", "/models/kimi-k2.5-sim", "--engine", "sglang")

    assert refused.code == 2 and "state the served model's path with `model_path` / --model" in refused.err
    assert done.code == 0, done.err
    (run,) = json.loads(done.out)["runs"]
    assert run["imported_from"]["tool"] == "genai-bench" and run["imported_from"]["format"] == "genai-bench-run"
