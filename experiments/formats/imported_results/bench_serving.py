"""SGLang `bench_serving` JSONL (pure): each `--output-file` line one cell at its `max_concurrency`, filed under the
server its `server_info` reports."""

from __future__ import annotations

from typing import Any

from .. import bounded_json
from .common import (
    DATASET_MAX,
    MAX_ERRORS,
    MAX_LINES,
    MAX_TEXT,
    SPEC_FIELDS,
    Cell,
    Checker,
    ImportedRun,
    ResultFileError,
    Server,
    is_plain,
    length,
    num_prompts,
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
OPTIONAL = {
    "total_throughput": "total_throughput",
    "input_throughput": "input_throughput",
    # bench_serving's "Accept length" is the server's window (/server_info's avg_spec_accept_length after the run),
    # not the requests' token-weighted figure: stored under its own definition (analysis/acceptance.DEFINITIONS).
    "accept_length": "server_accept_length",
    **{f"{s}_{m}_ms": f"{s}_{m}_ms" for m in LATENCIES for s in STATS},
}


def parse(content: str) -> list[ImportedRun]:
    lines = [(n, text) for n, text in enumerate(content.splitlines(), start=1) if text.strip()]
    if not lines:
        raise ResultFileError(["the file holds no result line"])
    if len(lines) > MAX_LINES:
        raise ResultFileError([f"at most {MAX_LINES} result lines are accepted (the file has {len(lines)})"])
    errors: list[str] = []
    runs: dict[tuple, list[tuple[Cell, dict[str, Any], Server, dict[str, Any]]]] = {}
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
            info = None
        info = _pd_decode(info)
        server = _sglang_server(row, info, check)
        cell = read_cell(row, check, REQUIRED, OPTIONAL, concurrency_key="max_concurrency")
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


def _sglang_server(row: dict[str, Any], info: dict[str, Any] | None, check: Checker) -> Server | None:
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
        command=text_of(first.get("command")),
        server=server,
        server_args={k: v for k, v in info.items() if k != "internal_states" and is_plain(v)},
        dataset=dataset[:DATASET_MAX] if isinstance(dataset, str) and dataset else "random",
        input_len=length(first.get("random_input_len"), first, "total_input_tokens"),
        output_len=length(first.get("random_output_len"), first, "total_output_tokens"),
        num_prompts=num_prompts(first),
        cells=cells,
    )
