"""SGLang `bench_serving` lines as each version writes them, built field by field from the tool's own source (the
`result` dict of `benchmark()` in `python/sglang/bench_serving.py` of the sglang wheels 0.3.6, 0.4.6 and 0.5.9, and
of `python/sglang/benchmark/serving.py` in 0.5.23, where `sglang.bench_serving` now re-exports it): what each
version leaves out is stated by the importer (`given`), and the issue's real case, two files of 0.5.23's
`sglang-oai` backend with a null `server_info` and two request shapes, becomes two profiles with the stated model
and settings and the files' throughput unchanged."""

from __future__ import annotations

import json

import pytest

from experiments.formats import imported_results
from experiments.formats.imported_results import ResultFileError, parse
from experiments.models import Experiment, Measurement, Run

from .factories import make_host
from .test_imports import _post

INF = float("inf")  # --request-rate's default; json.dumps writes it as Infinity, as bench_serving's file holds it


def _v036(**over) -> dict:
    """0.3.6: no max_concurrency, request_throughput, input_throughput nor server_info."""
    row = {
        "backend": "sglang", "dataset_name": "random", "request_rate": INF, "total_input_tokens": 4096,
        "total_output_tokens": 2048, "total_output_tokens_retokenized": 2040, "mean_e2e_latency_ms": 1500.0,
        "median_e2e_latency_ms": 1490.0, "median_ttft_ms": 30.0, "median_itl_ms": 9.0, "output_throughput": 100.0,
        "sharegpt_output_len": None, "random_input_len": 256, "random_output_len": 128, "random_range_ratio": 1.0,
        "duration": 20.48, "completed": 16,
    }  # fmt: skip
    return row | over


def _v046(**over) -> dict:
    """0.4.6: max_concurrency (null without --max-concurrency), the latency statistics and accept_length (null
    unless the sglang backend's /get_server_info reported one); still no server_info and no total_throughput."""
    row = {
        "backend": "sglang", "dataset_name": "random", "request_rate": INF, "max_concurrency": 4,
        "sharegpt_output_len": None, "random_input_len": 256, "random_output_len": 128, "random_range_ratio": 1.0,
        "duration": 6.4, "completed": 16, "total_input_tokens": 4096, "total_output_tokens": 2048,
        "total_output_tokens_retokenized": 2040, "request_throughput": 2.5, "input_throughput": 640.0,
        "output_throughput": 320.0, "mean_e2e_latency_ms": 1500.0, "median_e2e_latency_ms": 1490.0,
        "std_e2e_latency_ms": 20.0, "p99_e2e_latency_ms": 1600.0, "mean_ttft_ms": 30.0, "median_ttft_ms": 29.0,
        "std_ttft_ms": 2.0, "p99_ttft_ms": 40.0, "mean_tpot_ms": 11.0, "median_tpot_ms": 10.9, "std_tpot_ms": 0.5,
        "p99_tpot_ms": 12.0, "mean_itl_ms": 11.0, "median_itl_ms": 10.0, "std_itl_ms": 3.0, "p95_itl_ms": 20.0,
        "p99_itl_ms": 25.0, "concurrency": 3.9, "accept_length": None,
    }  # fmt: skip
    return row | over


SERVER_INFO_059 = {
    # /get_server_info: the ServerArgs dataclass, the scheduler's info, internal_states and the version.
    "model_path": "/models/llama-8b", "tp_size": 1, "speculative_algorithm": "EAGLE3",
    "speculative_draft_model_path": "/models/llama-8b-eagle3", "speculative_num_steps": 3,
    "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
    "internal_states": [{"avg_spec_accept_length": 2.8, "last_gen_throughput": 300.0}], "version": "0.5.9",
}  # fmt: skip


def _v059(**over) -> dict:
    """0.5.9: tag, server_info (null where /get_server_info did not answer 200), total_throughput, p90 latencies,
    the peak output rate and concurrency."""
    row = _v046() | {
        "tag": None, "server_info": SERVER_INFO_059, "total_input_text_tokens": 4096, "total_input_vision_tokens": 0,
        "total_throughput": 960.0, "p90_e2e_latency_ms": 1550.0, "accept_length": 2.8,
        "max_output_tokens_per_s": 400.0, "max_concurrent_requests": 4,
    }  # fmt: skip
    return row | over


def _v0523(**over) -> dict:
    """0.5.23 (sglang.benchmark.serving): server_info from /server_info, p90 and p95 of every latency; with
    --goodput the GoodputMetrics struct's fields (benchmark/goodput.py)."""
    row = _v059() | {
        "p95_e2e_latency_ms": 1580.0, "p90_ttft_ms": 35.0, "p95_ttft_ms": 38.0, "p90_tpot_ms": 11.5,
        "p95_tpot_ms": 11.8, "p90_itl_ms": 18.0, "server_info": {**SERVER_INFO_059, "version": "0.5.23"},
    }  # fmt: skip
    return row | over


def _jsonl(*rows: dict) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)  # as bench_serving appends its lines


def test_a_0_3_line_takes_its_model_and_concurrency_from_given_and_its_request_rate_from_its_counts():
    with pytest.raises(ResultFileError) as refused:
        parse(_jsonl(_v036()))
    (run,) = parse(_jsonl(_v036()), imported_results.SGLANG, {"model_path": "/models/llama-8b", "concurrency": 1})

    assert refused.value.errors == [
        "line 1: server_info: absent (backend sglang): state the served model's path with `model_path` / --model",
        "line 1: max_concurrency: absent: state the concurrency the client ran at with `concurrency` / --concurrency",
    ]
    (cell,) = run.cells
    assert run.server.model_path == "/models/llama-8b" and run.engine == "sglang" and cell.concurrency == 1
    assert cell.metrics["request_throughput"] == 16 / 20.48 and cell.metrics["total_throughput"] == 100.0
    assert cell.metrics["median_ttft_ms"] == 30.0 and (run.input_len, run.output_len, run.num_prompts) == (256, 128, 16)


def test_a_0_4_line_without_a_concurrency_limit_takes_the_given_one():
    (run,) = parse(_jsonl(_v046(max_concurrency=None)), "auto", {"model_path": "/models/llama-8b", "concurrency": 16})

    (cell,) = run.cells
    assert cell.concurrency == 16 and cell.metrics["total_throughput"] == 960.0  # input + output
    assert cell.metrics["server_accept_length"] is None and cell.raw["std_itl_ms"] == 3.0


def test_a_0_5_9_line_says_its_server_and_a_given_one_that_agrees_changes_nothing():
    (run,) = parse(_jsonl(_v059()), "auto", {"model_path": "/models/llama-8b", "tp_size": 1})

    assert run.version == "0.5.9" and run.engine == "sglang" and run.server.given == frozenset()
    assert run.server.speculative == {
        "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/models/llama-8b-eagle3",
        "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
    }  # fmt: skip
    assert run.cells[0].metrics["server_accept_length"] == 2.8 and run.cells[0].raw["max_output_tokens_per_s"] == 400


def test_a_0_5_23_line_keeps_its_goodput_and_its_details_become_request_rows():
    goodput = {"goodput_slos_ms": {"ttft": 500.0, "tpot": 50.0}, "request_goodput": 2.4, "slo_attainment": 0.96,
               "slo_attainment_by_metric": {"ttft": 1.0, "tpot": 0.96}}  # fmt: skip
    details = {"input_lens": [256, 256], "output_lens": [128, 0], "ttfts": [0.03, 0.0],
               "itls": [[0.01] * 127, []], "generated_texts": ["...", ""], "errors": ["", "timeout"]}  # fmt: skip

    (run,) = parse(_jsonl(_v0523(completed=1, **goodput, **details)))

    (cell,) = run.cells
    assert run.version == "0.5.23" and run.num_prompts == 2  # the details count the failed request too
    assert cell.raw["request_goodput"] == 2.4 and cell.raw["slo_attainment"] == 0.96
    assert cell.raw["goodput_slo_ttft_ms"] == 500.0 and cell.raw["slo_attainment_tpot"] == 0.96
    assert [r["ok"] for r in cell.metrics["requests"]] == [True, False]
    assert cell.metrics["requests"][0]["tpot_ms"] == pytest.approx(10.0)


def test_a_random_dataset_is_its_flags_another_one_its_mean_tokens():
    (sharegpt,) = parse(_jsonl(_v059(dataset_name="sharegpt")))

    # random_input_len and random_output_len are the flags' defaults on a sharegpt line, not its shape.
    assert (sharegpt.dataset, sharegpt.input_len, sharegpt.output_len) == ("sharegpt", 256, 128)
    (other,) = parse(_jsonl(_v059(dataset_name="sharegpt", total_input_tokens=1600, total_output_tokens=800)))
    assert (other.input_len, other.output_len) == (100, 50)


def test_lines_of_two_request_shapes_are_two_runs_never_one():
    runs = parse(_jsonl(_v059(), _v059(max_concurrency=8), _v059(random_output_len=256, max_concurrency=16)))

    assert [(run.output_len, [c.concurrency for c in run.cells]) for run in runs] == [(128, [4, 8]), (256, [16])]


# The two real files: 0.5.23, --backend sglang-oai, random ids, server_info null ----------------------------


def _oai(num_prompts: int, output_len: int, concurrency: int, duration: float) -> dict:
    row = _v0523(
        backend="sglang-oai", server_info=None, accept_length=None, max_concurrency=concurrency,
        random_input_len=32, random_output_len=output_len, completed=num_prompts, duration=duration,
        total_input_tokens=32 * num_prompts, total_output_tokens=output_len * num_prompts,
    )  # fmt: skip
    row["request_throughput"] = num_prompts / duration
    row["input_throughput"] = 32 * num_prompts / duration
    row["output_throughput"] = output_len * num_prompts / duration
    row["total_throughput"] = row["input_throughput"] + row["output_throughput"]
    return row


C4 = _oai(20, 50, 4, 2.5)
C128 = _oai(256, 256, 128, 12.8)
STATED = {"model_path": "/models/llama-8b", "tp_size": 2, "engine": "sglang", "speculative_algorithm": "EAGLE3",
          "speculative_draft_model_path": "/models/llama-8b-eagle3", "speculative_num_steps": 3,
          "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}  # fmt: skip


@pytest.mark.django_db
def test_the_two_real_files_need_their_server_stated_and_say_so(client, member):
    make_host(name="gpu-8")
    files = [{"name": "c4.jsonl", "content": _jsonl(C4)}, {"name": "c128.jsonl", "content": _jsonl(C128)}]

    response = _post(client, member, {"host": "gpu-8", "files": files})

    assert response.status_code == 400
    assert response.json()["errors"]["files[0]"] == [
        "c4.jsonl: line 1: server_info: null (backend sglang-oai): state the served model's path with `model_path` / "
        "--model"
    ]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_two_real_files_are_two_profiles_with_the_stated_server_and_their_own_throughput(client, member):
    make_host(name="gpu-8")
    files = [
        {"name": n, "content": _jsonl(row), "given": STATED} for n, row in (("c4.jsonl", C4), ("c128.jsonl", C128))
    ]

    response = _post(client, member, {"host": "gpu-8", "name": "nightly", "files": files})

    assert response.status_code == 201, response.json()
    made = response.json()["experiments"]
    assert [e["profile"] for e in made] == ["imported: random 32 in / 50 out, 20 prompts",
                                            "imported: random 32 in / 256 out, 256 prompts"]  # fmt: skip
    four, many = (Experiment.objects.get(pk=e["id"]) for e in made)
    assert (four.profile.num_prompts, four.profile.output_len, four.profile.concurrency) == (20, 50, [4])
    assert (many.profile.num_prompts, many.profile.output_len, many.profile.concurrency) == (256, 256, [128])
    for experiment, row in ((four, C4), (many, C128)):
        (run,) = experiment.run_set.all()
        assert run.config.model_path == "/models/llama-8b" and run.config.tp_size == 2
        assert run.config.speculative_algorithm == "EAGLE3" and run.config.speculative_num_steps == 3
        assert run.imported_from is not None and run.imported_from["engine"] == "sglang"
        assert "model_path" in run.imported_from["given"]
        (cell,) = Measurement.objects.filter(run=run)
        assert cell.output_throughput == row["output_throughput"]  # unchanged, to the bit
        assert cell.total_throughput == row["total_throughput"] and cell.request_throughput == row["request_throughput"]
        assert cell.mean_tpot_ms == row["mean_tpot_ms"] and cell.completed == row["completed"]
    assert four.run_set.get().config == many.run_set.get().config  # the one server, stated once


@pytest.mark.django_db
def test_a_file_of_another_shape_is_refused_from_an_experiment_naming_both_shapes(client, owner):
    make_host(name="gpu-8")
    first = _post(client, owner, {"host": "gpu-8", "files": [{"name": "c4.jsonl", "content": _jsonl(C4),
                                                             "given": STATED}]}).json()  # fmt: skip

    into = _post(client, owner, {"experiment": first["id"], "files": [{"name": "c128.jsonl", "content": _jsonl(C128),
                                                                      "given": STATED}]})  # fmt: skip

    assert into.status_code == 409
    assert into.json()["errors"]["files[0]"] == [
        f"c128.jsonl: line 1: measured random 32 in / 256 out, 256 prompts, but experiment {first['id']}'s profile is "
        "random 32 in / 50 out, 20 prompts; import it into a new experiment (give a host instead of the experiment)"
    ]
