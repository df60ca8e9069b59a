"""Benchmark result files made outside specdash (pure): SGLang `bench_serving` JSONL (its `--output-file` lines),
`vllm bench serve` JSON and `specforge benchmark --output-json` JSON, read into runs of cells whose metrics carry
`Measurement`'s names.

A file becomes one run per server it measured (the model and speculative settings that `server_info` reports), and
each of its lines (a vLLM file is one result) one cell at the line's `max_concurrency`; a concurrency seen twice is
a second pass. Validation is strict and every error names the line and the field, so nothing is guessed: a file
with any error is refused whole.

Long module: the three tools' readers share one checker (every error names the line and the field), one cell and
one server type, which would otherwise be imported across three modules; each reader is a screen long.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import bounded_json, request_details

SGLANG = "sglang-bench-serving"
VLLM = "vllm-bench-serve"
SPECFORGE = "specforge-benchmark"
FORMATS = (SGLANG, VLLM, SPECFORGE)
AUTO = "auto"

MAX_LINES = 10_000
MAX_ERRORS = 20  # a file that is wrong everywhere is refused with its first errors, not thousands
MAX_TEXT = 512  # a path, a version or a command line from a file, bounded
DATASET_MAX = 32  # BenchmarkProfile.dataset

# SGLang's names -> Measurement's; every other scalar of a line (std and p95 latencies, goodput, ...) is kept raw.
_STATS = ("mean", "median", "p90", "p99")
_LATENCIES = ("ttft", "tpot", "itl", "e2e_latency")
_SGLANG_REQUIRED = {
    "duration": "duration_s",
    "completed": "completed",
    "output_throughput": "output_throughput",
    "request_throughput": "request_throughput",
}
_SGLANG_OPTIONAL = {
    "total_throughput": "total_throughput",
    "input_throughput": "input_throughput",
    # bench_serving's "Accept length" is the server's window (/server_info's avg_spec_accept_length after the run),
    # not the requests' token-weighted figure: stored under its own definition (analysis/acceptance.DEFINITIONS).
    "accept_length": "server_accept_length",
    **{f"{s}_{m}_ms": f"{s}_{m}_ms" for m in _LATENCIES for s in _STATS},
}
_VLLM_REQUIRED = _SGLANG_REQUIRED  # the same names
_VLLM_OPTIONAL = {
    "total_token_throughput": "total_throughput",
    "failed": "failed",
    # 1 + accepted / drafts from the server's counters over the run: the pooled figure.
    "spec_decode_acceptance_length": "pooled_accept_length",
    **{f"{s}_{m}_ms": f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl") for s in _STATS},
    **{f"{s}_e2el_ms": f"{s}_e2e_latency_ms" for s in _STATS},  # vLLM calls end-to-end latency e2el
}
_INTEGERS = frozenset({"completed", "failed"})
# The server's speculative settings, from SGLang's /server_info as bench_serving stored it beside the results.
SPEC_FIELDS = (
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)
# What a SpecForge benchmark file does not hold and its importer states (specforge benchmark's own --model and
# --concurrency flags, and the server's speculative settings): `given` of `parse`.
SPECFORGE_GIVEN = ("model_path", "concurrency", "tp_size", *SPEC_FIELDS)
# vLLM's `speculative_config.method` -> SGLang's algorithm names, which specdash's configs use.
_VLLM_METHODS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN", "deepseek_mtp": "NEXTN", "ngram": "NGRAM"}
_VLLM_METHODS["draft_model"] = "STANDALONE"


class ResultFileError(ValueError):
    """A file that cannot be imported; `errors` are its messages, each naming the line and the field."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class Cell:
    concurrency: int
    line: int
    metrics: dict[str, Any]  # Measurement field -> value
    raw: dict[str, Any]  # what has no column: std and p95 latencies, goodput, the tool's own extras


@dataclass(frozen=True)
class Server:
    """What the file says was measured: the config specdash files the run under."""

    model_path: str
    tp_size: int = 1
    speculative: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple:
        return (self.model_path, self.tp_size, tuple(sorted(self.speculative.items())))


@dataclass(frozen=True)
class ImportedRun:
    tool: str
    version: str
    command: str
    server: Server
    server_args: dict[str, Any]  # the server's own args as the file holds them (SGLang's server_info)
    dataset: str
    input_len: int
    output_len: int
    num_prompts: int
    cells: list[Cell]


def detect(content: str) -> str:
    """The format of a file's text: a JSON object with `server_info` or several lines is bench_serving's."""
    text = content.strip()
    try:
        whole = bounded_json.loads(text, allow_nan=True)
    except ValueError:
        return SGLANG  # JSON lines (or nothing readable, which the SGLang reader then says line by line)
    if (
        isinstance(whole, dict)
        and "server_info" not in whole
        and ("total_token_throughput" in whole or "model_id" in whole)
    ):
        return VLLM
    return SGLANG


def parse(content: str, fmt: str = AUTO, given: Mapping[str, Any] | None = None) -> list[ImportedRun]:
    """The runs of a file's text; raises ResultFileError naming each bad line and field. `given`: what the
    importer states that the format does not hold (SpecForge's model and concurrency: SPECFORGE_GIVEN)."""
    if fmt == AUTO:
        fmt = detect(content)
    if fmt == SGLANG:
        return _parse_sglang(content)
    if fmt == VLLM:
        return _parse_vllm(content)
    if fmt == SPECFORGE:
        return _parse_specforge(content, given or {})
    raise ResultFileError([f"format: unknown {fmt!r} (one of {', '.join((AUTO, *FORMATS))})"])


def _parse_sglang(content: str) -> list[ImportedRun]:
    lines = [(n, text) for n, text in enumerate(content.splitlines(), start=1) if text.strip()]
    if not lines:
        raise ResultFileError(["the file holds no result line"])
    if len(lines) > MAX_LINES:
        raise ResultFileError([f"at most {MAX_LINES} result lines are accepted (the file has {len(lines)})"])
    errors: list[str] = []
    runs: dict[tuple, list[tuple[Cell, dict[str, Any], Server, dict[str, Any]]]] = {}
    for n, text in lines:
        check = _Checker(n, errors)
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
            info = None
        info = _pd_decode(info)
        server = _sglang_server(row, info, check)
        cell = _cell(row, check, _SGLANG_REQUIRED, _SGLANG_OPTIONAL, concurrency_key="max_concurrency")
        if server is None or cell is None:
            continue
        if cell.metrics.get("total_throughput") is None:
            # Older bench_serving lines: input + output throughput is what later ones call total.
            cell.metrics["total_throughput"] = cell.metrics["output_throughput"] + (
                cell.metrics["input_throughput"] or 0
            )
        states = (info or {}).get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], dict):
            window = check.number(states[0], "avg_spec_accept_length", optional=True)
            if window is not None:
                cell.metrics["server_accept_length"] = window
        runs.setdefault(server.key, []).append((cell, row, server, info or {}))
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


def _sglang_server(row: dict[str, Any], info: dict[str, Any] | None, check: _Checker) -> Server | None:
    if info is None:
        model = row.get("model_id") or row.get("model")
        if not isinstance(model, str) or not model:
            check.fail("server_info", "missing (null): the file does not say which model and settings were measured")
            return None
        return Server(model_path=model[:MAX_TEXT])
    model = info.get("model_path")
    if not isinstance(model, str) or not model:
        check.fail("server_info.model_path", "missing or not text")
        return None
    spec: dict[str, Any] = {}
    algorithm = info.get("speculative_algorithm")
    if algorithm not in (None, "", "NONE", "None"):
        if not isinstance(algorithm, str):
            check.fail("server_info.speculative_algorithm", "not text")
            return None
        spec["speculative_algorithm"] = algorithm.upper()[:16]
        draft = info.get("speculative_draft_model_path")
        if draft is not None and not isinstance(draft, str):
            check.fail("server_info.speculative_draft_model_path", "not text")
            return None
        if draft:
            spec["speculative_draft_model_path"] = draft[:MAX_TEXT]
        for name in SPEC_FIELDS[2:]:
            value = check.integer(info, name, prefix="server_info.", optional=True)
            if value is not None:
                spec[name] = value
    tp = check.integer(info, "tp_size", prefix="server_info.", optional=True)
    return Server(model_path=model[:MAX_TEXT], tp_size=max(1, tp or 1), speculative=spec)


def _sglang_run(group: list[tuple[Cell, dict[str, Any], Server, dict[str, Any]]]) -> ImportedRun:
    cells = [cell for cell, *_ in group]
    _, first, server, info = group[0]
    version = info.get("version")
    dataset = first.get("dataset_name")
    return ImportedRun(
        tool="sglang bench_serving",
        version=str(version)[:MAX_TEXT] if isinstance(version, str | int | float) else "",
        command=_text(first.get("command")),
        server=server,
        server_args={k: v for k, v in info.items() if k != "internal_states" and _is_plain(v)},
        dataset=dataset[:DATASET_MAX] if isinstance(dataset, str) and dataset else "random",
        input_len=_length(first.get("random_input_len"), first, "total_input_tokens"),
        output_len=_length(first.get("random_output_len"), first, "total_output_tokens"),
        num_prompts=_num_prompts(first),
        cells=cells,
    )


def _parse_vllm(content: str) -> list[ImportedRun]:
    errors: list[str] = []
    check = _Checker(1, errors)
    row = _one_object(content, "vllm bench serve")
    model = row.get("model_id")
    if not isinstance(model, str) or not model:
        check.fail("model_id", "missing or not text")
    cell = _cell(row, check, _VLLM_REQUIRED, _VLLM_OPTIONAL, concurrency_key="max_concurrency")
    spec = _vllm_speculative(row, check)
    if errors or cell is None or not isinstance(model, str):
        raise ResultFileError(errors[:MAX_ERRORS])
    if cell.metrics.get("total_throughput") is None:
        check.fail("total_token_throughput", "missing")
        raise ResultFileError(errors)
    tp = check.integer(row, "tensor_parallel_size", optional=True)
    version = row.get("vllm_version") or row.get("version")
    return [
        ImportedRun(
            tool="vllm bench serve",
            version=str(version)[:MAX_TEXT] if isinstance(version, str | int | float) else "",
            command=_text(row.get("command")),
            server=Server(model_path=model[:MAX_TEXT], tp_size=max(1, tp or 1), speculative=spec),
            server_args={},
            dataset=_text(row.get("dataset_name"))[:DATASET_MAX] or "random",
            input_len=_length(row.get("random_input_len"), row, "total_input_tokens"),
            output_len=_length(row.get("random_output_len"), row, "total_output_tokens"),
            num_prompts=_num_prompts(row),
            cells=[cell],
        )
    ]


def _parse_specforge(content: str, given: Mapping[str, Any]) -> list[ImportedRun]:
    """`specforge benchmark --output-json`: `{backend, dataset, samples, output_tokens, latency_seconds,
    throughput_tokens_per_second, average_acceptance_length, spec_verify_count}` for one model at one concurrency,
    neither of which the file names, so the importer states them (`given`). Its accept length is the unweighted
    mean of the requests' own (kept raw under that name); specdash's column takes the token-weighted figure,
    output_tokens / spec_verify_count, when the file has both."""
    errors: list[str] = []
    check = _Checker(1, errors)
    row = _one_object(content, "specforge benchmark")
    samples = check.integer(row, "samples", minimum=1)
    latency = check.number(row, "latency_seconds")
    throughput = check.number(row, "throughput_tokens_per_second")
    output_tokens = check.integer(row, "output_tokens", optional=True)
    verify = check.integer(row, "spec_verify_count", optional=True)
    mean_accept = check.number(row, "average_acceptance_length", optional=True)
    stated = _Checker(0, errors)
    for name in given:
        if name not in SPECFORGE_GIVEN:
            errors.append(f"{name}: not something a SpecForge import states (one of {', '.join(SPECFORGE_GIVEN)})")
    model = given.get("model_path")
    if not isinstance(model, str) or not model.strip() or len(model) > MAX_TEXT:
        errors.append(f"model_path: the served model's path is required (the file does not hold it; <= {MAX_TEXT})")
    concurrency = stated.integer(dict(given), "concurrency", minimum=1)
    tp = stated.integer(dict(given), "tp_size", optional=True, minimum=1)
    spec: dict[str, Any] = {}
    for name in SPEC_FIELDS:
        value = given.get(name)
        if value is None:
            continue
        if name in ("speculative_algorithm", "speculative_draft_model_path"):
            if not isinstance(value, str) or len(value) > MAX_TEXT:
                errors.append(f"{name}: text of at most {MAX_TEXT} characters")
            else:
                spec[name] = value
        elif (number := stated.integer(dict(given), name, minimum=1)) is not None:
            spec[name] = number
    if latency == 0:
        check.fail("latency_seconds", "zero: no throughput can be read")
    if errors or samples is None or latency is None or throughput is None or concurrency is None:
        raise ResultFileError([e.replace("line 0: ", "") for e in errors][:MAX_ERRORS])
    assert isinstance(model, str)
    # Its output tokens over its verify steps are the token-weighted figure; its average is a mean of requests.
    token_weighted = output_tokens / verify if output_tokens and verify else None
    metrics = {
        "duration_s": latency,
        "completed": samples,
        "output_throughput": throughput,
        # The file counts no input tokens: its total is its output, and says so (raw).
        "total_throughput": throughput,
        "request_throughput": samples / latency,
        "accept_length": token_weighted,
        "mean_request_accept_length": mean_accept,
    }
    mapped = {"samples", "latency_seconds", "throughput_tokens_per_second"}
    raw = {k: v for k, v in row.items() if k not in mapped and _is_scalar(v)}
    raw["total_throughput_counts"] = "output tokens only: the file holds no input token count"
    cell = Cell(concurrency=concurrency, line=1, metrics=metrics, raw=raw)
    output_len = max(1, round(output_tokens / samples)) if output_tokens else 1
    return [
        ImportedRun(
            tool="specforge benchmark",
            version="",
            command="",
            server=Server(model_path=model.strip()[:MAX_TEXT], tp_size=tp or 1, speculative=spec),
            server_args={},
            dataset=_text(row.get("dataset"))[:DATASET_MAX] or "specforge",
            input_len=1,
            output_len=output_len,
            num_prompts=samples,
            cells=[cell],
        )
    ]


def _one_object(content: str, tool: str) -> dict[str, Any]:
    """The one JSON object a tool writes, or ResultFileError saying what the text is instead."""
    try:
        row = bounded_json.loads(content, allow_nan=True)
    except bounded_json.JsonRefused as exc:
        raise ResultFileError([f"line 1: {exc}"]) from None
    except ValueError as exc:
        raise ResultFileError([f"line 1: not JSON ({exc})"]) from None
    if not isinstance(row, dict):
        raise ResultFileError([f"line 1: not a JSON object ({tool} writes one object)"])
    return row


def _vllm_speculative(row: dict[str, Any], check: _Checker) -> dict[str, Any]:
    """vLLM's JSON holds no server args; a `speculative_config` given with `--metadata` names the method."""
    config = row.get("speculative_config")
    if config is None:
        return {}
    if isinstance(config, str):
        try:
            config = bounded_json.loads(config, allow_nan=True)
        except ValueError:
            config = None
    if not isinstance(config, dict):
        check.fail("speculative_config", "not an object")
        return {}
    method = config.get("method")
    algorithm = _VLLM_METHODS.get(str(method).lower()) if method is not None else None
    if algorithm is None:
        check.fail("speculative_config.method", f"unknown method {str(method)[:40]!r}")
        return {}
    spec: dict[str, Any] = {"speculative_algorithm": algorithm}
    if isinstance(config.get("model"), str) and config["model"]:
        spec["speculative_draft_model_path"] = config["model"][:MAX_TEXT]
    steps = check.integer(config, "num_speculative_tokens", prefix="speculative_config.", optional=True)
    if steps is not None:
        # vLLM drafts a chain, one token per step: SGLang's topk 1, whose tree holds steps + 1 tokens.
        spec["speculative_num_steps"] = steps
        spec["speculative_eagle_topk"] = 1
        spec["speculative_num_draft_tokens"] = steps + 1
    return spec


def _cell(
    row: dict[str, Any], check: _Checker, required: dict[str, str], optional: dict[str, str], *, concurrency_key: str
) -> Cell | None:
    before = len(check.errors)
    concurrency = check.integer(row, concurrency_key, minimum=1)
    metrics: dict[str, Any] = {}
    for source, target in (*required.items(), *optional.items()):
        reader = check.integer if target in _INTEGERS else check.number
        metrics[target] = reader(row, source, optional=source not in required)
    requests = request_details.request_rows(row, check.fail)  # with --output-details / --save-detailed
    if len(check.errors) > before or concurrency is None:
        return None
    if requests is not None:
        metrics["requests"] = requests
    mapped = {concurrency_key, *required, *optional, "server_info"}
    raw = {k: v for k, v in row.items() if k not in mapped and _is_scalar(v)}
    return Cell(concurrency=concurrency, line=check.line, metrics=metrics, raw=raw)


class _Checker:
    """Reads a line's fields, recording "line N: field: what is wrong" for each one that is not as it must be."""

    def __init__(self, line: int, errors: list[str]) -> None:
        self.line, self.errors = line, errors

    def fail(self, name: str, message: str) -> None:
        self.errors.append(f"line {self.line}: {name}: {message}" if name else f"line {self.line}: {message}")

    def number(self, row: dict[str, Any], name: str, *, prefix: str = "", optional: bool = False) -> float | None:
        value = row.get(name)
        if value is None:
            if not optional:
                self.fail(prefix + name, "missing")
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(prefix + name, "not a number")
            return None
        if not math.isfinite(value):
            self.fail(prefix + name, "not a finite number")
            return None
        if value < 0:
            self.fail(prefix + name, "negative")
            return None
        return float(value)

    def integer(
        self, row: dict[str, Any], name: str, *, prefix: str = "", optional: bool = False, minimum: int = 0
    ) -> int | None:
        value = self.number(row, name, prefix=prefix, optional=optional)
        if value is None:
            return None
        if value != int(value) or value < minimum or value > 2**31 - 1:
            self.fail(prefix + name, f"not a whole number of at least {minimum}")
            return None
        return int(value)


def _length(explicit: Any, row: dict[str, Any], total_key: str) -> int:
    """A profile's length: the tool's flag when it wrote it, else the mean tokens per completed request."""
    if isinstance(explicit, int) and not isinstance(explicit, bool) and explicit > 0:
        return explicit
    total, completed = row.get(total_key), row.get("completed")
    if isinstance(total, int | float) and isinstance(completed, int | float) and completed > 0 and total > 0:
        return max(1, round(total / completed))
    return 1


def _num_prompts(row: dict[str, Any]) -> int:
    value = row.get("num_prompts")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    completed, failed = row.get("completed"), row.get("failed")
    count = int(completed) if isinstance(completed, int | float) else 0
    count += int(failed) if isinstance(failed, int) and not isinstance(failed, bool) else 0
    return max(1, count)


def _text(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = " ".join(value)
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def _is_scalar(value: Any) -> bool:
    """What a raw cell keeps: numbers and short texts; the per-request lists of `--output-details` are dropped."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, bool | int) or (isinstance(value, str) and len(value) <= MAX_TEXT)


def _is_plain(value: Any) -> bool:
    """A server arg worth keeping: a scalar, or a small list or object without NaN or infinities (JSON has none)."""
    if not isinstance(value, list | dict):
        return _is_scalar(value)
    try:
        return len(json.dumps(value, allow_nan=False, default=str)) <= MAX_TEXT
    except ValueError:
        return False
