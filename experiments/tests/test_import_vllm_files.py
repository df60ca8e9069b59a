"""`vllm bench serve` files as vLLM really writes them, and what `vllm bench sweep` writes: each built field by field
from vLLM's source, vllm-project/vllm at 009e6d4a (vllm/benchmarks/serve.py: `benchmark`'s result, `main_async`'s
result_json, `--save-detailed`, `--append-result`) and at 0031557f (vllm/benchmarks/sweep/serve.py: `run_benchmark`,
`run_comb`, `run_combs`; param_sweep.py: a parameter's own name)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest

from experiments.formats import imported_results
from experiments.formats.imported_results import ResultFileError, detect, parse

SPEC = {"method": "eagle3", "model": "/models/llama-eagle3", "num_speculative_tokens": 3}


def _result(concurrency: int | None = 4, **changes) -> dict:
    """serve.py 009e6d4a: result_json's setup keys, then `benchmark`'s result (its lists kept without
    --save-detailed: `latencies`, `queue_times`), then process_one_metric's stats for --percentile-metrics
    ttft,tpot,itl,e2el --metric-percentiles 90,99, then the spec-decode counters' deltas."""
    row = {
        "date": "20261201-101500",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": "/models/llama",
        "tokenizer_id": "/models/llama",
        "num_prompts": 8,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": concurrency,
        "duration": 4.0,
        "completed": 8,
        "failed": 0,
        "total_input_tokens": 1024,
        "total_output_tokens": 1024,
        "request_throughput": 2.0,
        "request_goodput": None,
        "output_throughput": 256.0,
        "total_token_throughput": 512.0,
        "latencies": [1.9] * 8,
        "queue_times": [0.0] * 8,
        "max_output_tokens_per_s": 300.0,
        "max_concurrent_requests": 4,
        "rtfx": 0.0,
        "spec_decode_acceptance_rate": 62.0,
        "spec_decode_acceptance_length": 2.86,
        "spec_decode_num_drafts": 358,
        "spec_decode_draft_tokens": 1074,
        "spec_decode_accepted_tokens": 666,
        "spec_decode_per_position_acceptance_rates": [0.8, 0.6, 0.46],
    }
    for metric, mean in (("ttft", 40.0), ("tpot", 14.0), ("itl", 13.5), ("e2el", 1900.0)):
        row |= {f"mean_{metric}_ms": mean, f"median_{metric}_ms": mean, f"std_{metric}_ms": 1.0}
        row |= {f"p90_{metric}_ms": mean * 1.1, f"p99_{metric}_ms": mean * 1.2}
    return row | changes


# --save-detailed: the per-request arrays (serve.py `benchmark`: seconds; a failed request has ttft 0.0, no gaps,
# output length 0 and its error text).
DETAILED: dict[str, Any] = {
    "input_lens": [128, 128, 128],
    "output_lens": [3, 2, 0],
    "ttfts": [0.04, 0.05, 0.0],
    "itls": [[0.01, 0.02], [0.03], []],
    "start_times": [0.0, 0.1, 0.2],
    "generated_texts": ["a b c", "d e", ""],
    "errors": ["", "", "ClientConnectorError"],
}


def test_a_save_detailed_file_has_its_requests_and_keeps_none_of_its_lists_raw():
    row = _result(**DETAILED, completed=2, failed=1)

    (run,) = parse(json.dumps(row))

    (cell,) = run.cells
    assert [r["ok"] for r in cell.metrics["requests"]] == [True, True, False]
    first = cell.metrics["requests"][0]
    assert first["ttft_ms"] == pytest.approx(40.0) and first["e2e_latency_ms"] == pytest.approx(70.0)
    assert first["tpot_ms"] == pytest.approx(15.0)  # (70 - 40) / (3 - 1)
    assert cell.metrics["pooled_accept_length"] == 2.86 and cell.metrics["failed"] == 1
    assert not any(isinstance(v, list) for v in cell.raw.values())
    assert cell.raw["max_concurrent_requests"] == 4 and cell.raw["spec_decode_num_drafts"] == 358


def test_append_result_lines_are_one_run_whose_lines_are_its_cells():
    # --append-result: json.dump of each result, "\n" between (serve.py main_async, mode "a+").
    content = json.dumps(_result(1, output_throughput=100.0)) + "\n" + json.dumps(_result(4))

    assert detect(content) == imported_results.VLLM
    (run,) = parse(content)

    cells = [(c.concurrency, c.line, c.metrics["output_throughput"]) for c in run.cells]
    assert cells == [(1, 1, 100.0), (4, 2, 256.0)]
    assert run.tool == "vllm bench serve"
    with pytest.raises(ResultFileError) as refused:
        parse(content + "\n" + json.dumps(_result(8, output_throughput="fast")))
    assert refused.value.errors == ["line 3: output_throughput: not a number"]


# vllm bench sweep -------------------------------------------------------------------------------------------------


def _sweep_run(run_number: int, serve: dict, bench: dict, **changes) -> dict:
    """sweep/serve.py `run_benchmark` + `_update_run_data`: the --save-result JSON with `run_number`, then the serve
    combination's parameters, then the bench one's, each under the name the sweep's JSON gave it."""
    return {**_result(bench.get("max_concurrency", 4), **changes), "run_number": run_number, **serve, **bench}


def test_a_sweep_run_file_is_read_with_the_server_its_serve_parameters_name():
    run_file = json.dumps(_sweep_run(0, {"speculative_config": SPEC}, {"max_concurrency": 8}), indent=4)

    assert detect(run_file) == imported_results.VLLM_SWEEP
    (run,) = parse(run_file)

    assert run.tool == "vllm bench sweep" and run.server.model_path == "/models/llama"
    assert run.server.speculative == {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path":
                                      "/models/llama-eagle3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                                      "speculative_num_draft_tokens": 4}  # fmt: skip
    assert [c.concurrency for c in run.cells] == [8] and run.cells[0].raw["run_number"] == 0


def test_a_sweep_summary_json_is_its_runs_each_a_pass_and_its_warmup_is_refused():
    # run_comb: summary.json is json.dump(comb_data, indent=4), the list of the combination's runs.
    runs = [_sweep_run(n, {"speculative-config": SPEC}, {"max_concurrency": 4}) for n in range(3)]

    (run,) = parse(json.dumps(runs, indent=4))

    assert [(c.concurrency, c.line) for c in run.cells] == [(4, 1), (4, 2), (4, 3)]  # passes, by index + 1
    assert run.server.speculative["speculative_algorithm"] == "EAGLE3"  # the CLI's spelling, read as vLLM's
    warmup = json.dumps(_sweep_run(-1, {}, {"num_prompts": 4}), indent=4)  # run_comb's warmup.json
    with pytest.raises(ResultFileError, match=r"run_number: -1, a vllm bench sweep warm-up run \(warmup.json\)"):
        parse(warmup)
    runs[1]["completed"] = "eight"
    with pytest.raises(ResultFileError) as refused:
        parse(json.dumps(runs))
    assert refused.value.errors == ["line 1: [1].completed: not a number"]


def _summary_csv(records: list[dict]) -> str:
    """run_combs: pandas' DataFrame.from_records(all_data).to_csv(): an unnamed index column, the union of the
    records' keys, a missing value empty, a list or dict written as Python's repr (str())."""
    columns: list[str] = []
    for record in records:
        columns += [k for k in record if k not in columns]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["", *columns])
    for index, record in enumerate(records):
        writer.writerow([index, *("" if record.get(k) is None else str(record[k]) for k in columns)])
    return out.getvalue()


def test_a_sweep_summary_csv_is_one_run_per_server_its_rows_the_cells():
    records = [
        _sweep_run(0, {"_benchmark_name": "base"}, {"max_concurrency": 1}, output_throughput=90.0),
        _sweep_run(0, {"_benchmark_name": "base"}, {"max_concurrency": 4}),
        _sweep_run(0, {"_benchmark_name": "eagle3", "speculative_config": SPEC}, {"max_concurrency": 1}),
        _sweep_run(1, {"_benchmark_name": "eagle3", "speculative_config": SPEC}, {"max_concurrency": 1}),
    ]
    content = _summary_csv(records)

    assert detect(content) == imported_results.VLLM_SWEEP
    base, eagle3 = parse(content)

    assert base.server.speculative == {} and eagle3.server.speculative["speculative_num_steps"] == 3
    cells = [(c.concurrency, c.line, c.metrics["output_throughput"]) for c in base.cells]
    assert cells == [(1, 2, 90.0), (4, 3, 256.0)]
    assert [(c.concurrency, c.line) for c in eagle3.cells] == [(1, 4), (1, 5)]  # a second pass at 1
    assert base.cells[0].metrics["p99_e2e_latency_ms"] == pytest.approx(2280.0)
    assert "latencies" not in base.cells[0].raw  # its repr, a list, is not read back


def test_a_sweep_summary_csv_row_that_is_wrong_is_refused_by_its_line():
    records = [_sweep_run(0, {}, {"max_concurrency": 1}), _sweep_run(0, {}, {"max_concurrency": 2}, duration=-1)]

    with pytest.raises(ResultFileError) as refused:
        parse(_summary_csv(records))

    assert refused.value.errors == ["line 3: duration: negative"]


def test_a_summary_csv_value_is_read_as_a_literal_only_never_run():
    # A CSV's nested value is Python's repr, read back with ast.literal_eval (literals only, at most 512
    # characters): an expression is text, refused where a setting is expected; a nesting bomb is left out.
    call = "{'method': __import__('os').system('touch /tmp/specdash-pwned')}"
    records = [_sweep_run(0, {"speculative_config": call, "nested": "[" * 400}, {"max_concurrency": 1})]

    with pytest.raises(ResultFileError) as refused:
        parse(_summary_csv(records))

    assert refused.value.errors == ["line 2: speculative_config: not an object"]
