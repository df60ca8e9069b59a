"""SGLang `bench_serving` JSONL (pure): each `--output-file` line one cell at its `max_concurrency`, filed under the
server its `server_info` reports (or the importer states) and the request shape the line was measured with.

What a line holds depends on the version that wrote it (read from `python/sglang/bench_serving.py`, since 0.5.22
`python/sglang/benchmark/serving.py`, `benchmark()`'s `result` dict):
- 0.3.x: no `request_throughput`, `input_throughput`, `max_concurrency` nor `server_info`;
- 0.4.x: `max_concurrency` (null without `--max-concurrency`), `accept_length`; no `server_info`, no
  `total_throughput` (input + output is what later versions call it);
- 0.5.x: `server_info` (the server's `/get_server_info`, from 0.5.22 `/server_info`; null where it did not answer
  200, as behind `sglang-oai` at a plain OpenAI endpoint), `total_throughput`, `tag`, p90 and (0.5.22) p95
  latencies, and with `--goodput` (0.5.22) `request_goodput`, `slo_attainment`, `goodput_slos_ms`,
  `slo_attainment_by_metric`;
- every version with `--output-details`: the per-request arrays `input_lens`, `output_lens`, `ttfts`, `itls`,
  `generated_texts`, `errors` (formats/request_details.py).
No version writes the model, the number of prompts or a date outside `server_info`: what the file does not say, the
importer states (common.GIVEN)."""

from __future__ import annotations

from typing import Any

from .. import bounded_json

# specdash's own figures on a line it exported, under a key bench_serving never writes: the export's own names.
from ..bench_serving_export import EXTENSION_FIELDS, EXTENSION_KEY
from .common import (
    DATASET_MAX,
    MAX_ERRORS,
    MAX_LINES,
    MAX_TEXT,
    SERVER_FIELDS,
    SPEC_FIELDS,
    Cell,
    Checker,
    Given,
    ImportedRun,
    ResultFileError,
    Server,
    is_plain,
    length,
    measured_at,
    read_cell,
    text_of,
)

# SGLang's names -> Measurement's; every other scalar of a line (std and p95 latencies, goodput, ...) is kept raw.
STATS = ("mean", "median", "p90", "p99")
LATENCIES = ("ttft", "tpot", "itl", "e2e_latency")
REQUIRED = {
    "duration": "duration_s",
    "completed": "completed",
    "output_throughput": "output_throughput",
    "request_throughput": "request_throughput",
}
# 0.3.x writes no request_throughput: a line's is then its completed requests over its duration.
LINE_REQUIRED = {k: v for k, v in REQUIRED.items() if k != "request_throughput"}
OPTIONAL = {
    "request_throughput": "request_throughput",
    "total_throughput": "total_throughput",
    "input_throughput": "input_throughput",
    # bench_serving's "Accept length" is the server's window (/server_info's avg_spec_accept_length after the run),
    # not the requests' token-weighted figure: stored under its own definition (analysis/acceptance.DEFINITIONS).
    "accept_length": "server_accept_length",
    **{f"{s}_{m}_ms": f"{s}_{m}_ms" for m in LATENCIES for s in STATS},
}
# bench_serving's --backend -> the engine it measured. The OpenAI-compatible backends (sglang-oai, sglang-oai-chat)
# reach any such server: the engine is SGLang only where the line's server_info (SGLang's own endpoint) says so.
ENGINE_OF_BACKEND = {
    "sglang": "sglang",
    "sglang-native": "sglang",
    "vllm": "vllm",
    "vllm-chat": "vllm",
    "lmdeploy": "lmdeploy",
    "lmdeploy-chat": "lmdeploy",
    "trt": "tensorrt-llm",
}
# Where a line states each server field, for the refusal that a given value contradicts it.
STATED_AT = {name: f"server_info.{name}" for name in (*SERVER_FIELDS, *SPEC_FIELDS)}


def parse(content: str, given: Given | None = None) -> list[ImportedRun]:
    """One run per server and request shape: lines of another shape (dataset, input and output lengths, number of
    prompts) are another run, so that no profile ever claims a cell measured under another's."""
    given = given or Given()
    lines = [(n, text) for n, text in enumerate(content.splitlines(), start=1) if text.strip()]
    if not lines:
        raise ResultFileError(["the file holds no result line"])
    if len(lines) > MAX_LINES:
        raise ResultFileError([f"at most {MAX_LINES} result lines are accepted (the file has {len(lines)})"])
    errors: list[str] = []
    runs: dict[tuple, list[tuple[Cell, dict[str, Any], Server, dict[str, Any], str]]] = {}
    for n, text in lines:
        check = Checker(n, errors)
        try:
            row = bounded_json.loads(text, allow_nan=True)
        except bounded_json.JsonRefused as exc:
            check.fail(exc.field, exc.reason)
            continue
        except ValueError as exc:
            check.fail("", f"not JSON ({exc})")
            continue
        if not isinstance(row, dict):
            check.fail("", "not a JSON object")
            continue
        info = row.get("server_info")
        if info is not None and not isinstance(info, dict):
            check.fail("server_info", "not an object")
            continue
        info = _pd_decode(info)
        server = _sglang_server(row, info, check, given)
        engine = given.resolve("engine", _engine(row, info), check, where="backend")
        cell = read_cell(row, check, LINE_REQUIRED, OPTIONAL, concurrency_key="max_concurrency", given=given)
        if server is None or cell is None:
            continue
        metrics = cell.metrics
        if metrics.get("request_throughput") is None:
            metrics["request_throughput"] = (
                metrics["completed"] / metrics["duration_s"] if metrics["duration_s"] else 0.0
            )
        if metrics.get("total_throughput") is None:
            # Older bench_serving lines: input + output throughput is what later ones call total.
            metrics["total_throughput"] = metrics["output_throughput"] + (metrics.get("input_throughput") or 0)
        states = (info or {}).get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], dict):
            window = check.number(states[0], "avg_spec_accept_length", optional=True)
            if window is not None:
                metrics["server_accept_length"] = window
        cell.raw.update(_goodput(row))
        metrics.update(_extension(row, check))
        shape = _shape(row)
        runs.setdefault((server.key, shape, engine or ""), []).append((cell, row, server, info or {}, engine or ""))
        if len(errors) >= MAX_ERRORS:
            break
    if errors:
        raise ResultFileError(errors[:MAX_ERRORS])
    return [_sglang_run(group) for group in runs.values()]


def _pd_decode(info: dict[str, Any] | None) -> dict[str, Any] | None:
    """Under PD disaggregation /server_info is {"decode": [...], ...}: the decode server's is the one measured."""
    if info is not None and isinstance(info.get("decode"), list) and info["decode"] and "model_path" not in info:
        first = info["decode"][0]
        return first if isinstance(first, dict) else None
    return info


def _engine(row: dict[str, Any], info: dict[str, Any] | None) -> str | None:
    if info is not None:
        return "sglang"  # only SGLang answers /server_info with its server args
    backend = row.get("backend")
    return ENGINE_OF_BACKEND.get(backend) if isinstance(backend, str) else None


def _sglang_server(row: dict[str, Any], info: dict[str, Any] | None, check: Checker, given: Given) -> Server | None:
    backend = text_of(row.get("backend"))[:40] or "not named"
    if info is None:
        # Before 0.5 no line has server_info; from 0.5 it is null where the server did not answer /server_info.
        why = f"{'null' if 'server_info' in row else 'absent'} (backend {backend})"
        model = row.get("model_id") or row.get("model")
        stated = {"model_path": model if isinstance(model, str) and model else None}
        return given.server(check, stated, where={**STATED_AT, "model_path": "server_info"}, why=why)
    model = info.get("model_path")
    if model is not None and (not isinstance(model, str) or not model):
        check.fail("server_info.model_path", "not text")
        return None
    said: dict[str, Any] = {"model_path": model}
    algorithm = info.get("speculative_algorithm")
    if algorithm is not None and not isinstance(algorithm, str):
        check.fail("server_info.speculative_algorithm", "not text")
        return None
    # The server's args name every field: an algorithm of None is a server that did not speculate.
    said["speculative_algorithm"] = "" if algorithm in (None, "", "NONE", "None") else algorithm.upper()[:16]
    if said["speculative_algorithm"]:
        draft = info.get("speculative_draft_model_path")
        if draft is not None and not isinstance(draft, str):
            check.fail("server_info.speculative_draft_model_path", "not text")
            return None
        said["speculative_draft_model_path"] = draft[:MAX_TEXT] if draft else None
        for name in SPEC_FIELDS[2:]:
            said[name] = check.integer(info, name, prefix="server_info.", optional=True)
    said["tp_size"] = check.integer(info, "tp_size", prefix="server_info.", optional=True, minimum=1)
    why = "missing from server_info"
    return given.server(check, said, where=STATED_AT, why=why)


def _shape(row: dict[str, Any]) -> tuple[str, int, int, int]:
    """(dataset, input len, output len, prompts) of one line. bench_serving writes `random_input_len` and
    `random_output_len` whatever the dataset (its flags' defaults): they are the shape only for a random dataset;
    another's is its mean tokens per request. The prompts are the requests sent: the details' count where the line
    has them, else its completed requests (no version writes --num-prompts nor its failed requests)."""
    dataset = row.get("dataset_name")
    name = dataset[:DATASET_MAX] if isinstance(dataset, str) and dataset else "random"
    is_random = name.startswith("random")
    input_len = length(row.get("random_input_len") if is_random else None, row, "total_input_tokens")
    output_len = length(row.get("random_output_len") if is_random else None, row, "total_output_tokens")
    sent = row.get("ttfts")
    completed = row.get("completed")
    prompts = completed if isinstance(completed, int) and not isinstance(completed, bool) and completed > 0 else 1
    if isinstance(sent, list):
        prompts = max(prompts, len(sent))  # failed requests are in the details, not in `completed`
    return (name, input_len, output_len, prompts)


def _goodput(row: dict[str, Any]) -> dict[str, Any]:
    """--goodput's objects (0.5.22: `goodput_slos_ms` {metric: ms}, `slo_attainment_by_metric` {metric: share})
    flattened into raw scalars; `request_goodput` and `slo_attainment` are kept raw as they are."""
    flat: dict[str, Any] = {}
    for key, template in (("goodput_slos_ms", "goodput_slo_{}_ms"), ("slo_attainment_by_metric", "slo_attainment_{}")):
        value = row.get(key)
        if isinstance(value, dict):
            for metric, number in list(value.items())[:8]:
                if (
                    metric in ("ttft", "tpot", "e2el")
                    and isinstance(number, int | float)
                    and not isinstance(number, bool)
                ):
                    flat[template.format(metric)] = number
    return flat


def _extension(row: dict[str, Any], check: Checker) -> dict[str, Any]:
    """A line specdash exported (formats/bench_serving_export.py) keeps its other figures under `specdash`, a key
    bench_serving never writes: its acceptance figures (token-weighted, pooled, mean of requests), steady-state
    window and failed requests come back into their own columns, each checked as a number."""
    extension = row.get(EXTENSION_KEY)
    if not isinstance(extension, dict):
        return {}
    figures: dict[str, Any] = {}
    for name in EXTENSION_FIELDS:
        reader = check.integer if name == "failed" else check.number
        value = reader(extension, name, prefix=f"{EXTENSION_KEY}.", optional=True)
        if value is not None:
            figures[name] = value
    return figures


def _sglang_run(group: list[tuple[Cell, dict[str, Any], Server, dict[str, Any], str]]) -> ImportedRun:
    cells = [cell for cell, *_ in group]
    _, first, server, info, engine = group[0]
    version = info.get("version")
    dataset, input_len, output_len, prompts = _shape(first)
    return ImportedRun(
        tool="sglang bench_serving",
        version=str(version)[:MAX_TEXT] if isinstance(version, str | int | float) else "",
        command=text_of(first.get("command")),
        server=server,
        server_args={k: v for k, v in info.items() if k != "internal_states" and is_plain(v)},
        dataset=dataset,
        input_len=input_len,
        output_len=output_len,
        num_prompts=prompts,
        cells=cells,
        engine=engine,
        measured_at=measured_at(first.get("date")),
    )
