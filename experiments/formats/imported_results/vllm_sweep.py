"""Many `vllm bench serve` results in one file (pure): what `vllm bench sweep serve` (and `serve_workload`) writes,
and `vllm bench serve --append-result`'s JSON lines. Each result is read as one `vllm bench serve` JSON
(`vllm_bench.parse`), so the fields map as there; results of one server at one concurrency are passes of one cell.

A sweep (vllm/benchmarks/sweep/serve.py) writes under `<output-dir>/<experiment>/`, per serve x bench parameter
combination, a folder `SERVE-<name>-BENCH-<name>/` of `run=<n>.json` (a `--save-result` JSON with `run_number` and
that combination's parameters added: a `vllm bench serve` file, read as one), a `summary.json` (the list of those
runs) and an optional `warmup.json` (`run_number` -1, left out of the summary: refused by name); and one
`summary.csv` over every combination (pandas `to_csv` of the same records: an unnamed index column, a nested value
written as Python's repr, a missing one empty). A serve parameter (`speculative_config`, `tensor_parallel_size`)
lands in each record under the name the sweep's JSON gave it, so the server a record measured is read from it.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import math
from dataclasses import replace
from typing import Any

from .. import bounded_json
from . import vllm_bench
from .common import MAX_ERRORS, MAX_LINES, MAX_TEXT, Given, ImportedRun, ResultFileError

SWEEP = "vllm bench sweep"
# vllm bench serve's per-request lists (serve.py `benchmark`), which pandas writes as long reprs.
PER_REQUEST = frozenset(
    {"input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times", "generated_texts",
     "errors", "spec_decode_per_position_acceptance_rates", "rps_change_events"}
)  # fmt: skip
SUMMARY_COLUMNS = frozenset({"run_number", "request_throughput", "output_throughput"})


def is_sweep_record(row: Any) -> bool:
    """A sweep's run record: a `vllm bench serve` result with the sweep's `run_number`."""
    return isinstance(row, dict) and "run_number" in row and "server_info" not in row


def is_summary_csv(text: str) -> bool:
    """The header pandas writes for a sweep's summary: an unnamed index column, then the records' keys."""
    header = text.lstrip("\ufeff").split("\n", 1)[0]
    return header.startswith(",") and SUMMARY_COLUMNS <= set(header.strip().split(","))


def parse(content: str, given: Given | None = None) -> list[ImportedRun]:
    """A sweep's `summary.csv`, `summary.json` (a list of run records) or one `run=<n>.json`."""
    if is_summary_csv(content):
        return _merged(_csv_records(content), given, "line", SWEEP)
    try:
        records = bounded_json.loads(content, allow_nan=True)
    except bounded_json.JsonRefused as exc:
        raise ResultFileError([f"line 1: {exc}"]) from None
    except ValueError as exc:
        raise ResultFileError([f"line 1: not JSON ({exc})"]) from None
    if isinstance(records, dict):
        if records.get("run_number") == -1:
            raise ResultFileError(
                [
                    "line 1: run_number: -1, a vllm bench sweep warm-up run (warmup.json), which the sweep leaves "
                    "out of its summary: import the combination's run=<n>.json files or its summary.json"
                ]
            )
        return _merged([(1, records)], given, "line", SWEEP)
    if not isinstance(records, list) or not records or len(records) > MAX_LINES:
        raise ResultFileError(
            [f"line 1: not a list of 1 to {MAX_LINES} runs (a vllm bench sweep summary.json lists its runs)"]
        )
    return _merged(list(enumerate(records)), given, "index", SWEEP)


def is_result_lines(text: str) -> bool:
    """`--append-result`'s file: JSON lines whose first is a `vllm bench serve` result."""
    first = text.lstrip().split("\n", 1)[0]
    try:
        row = bounded_json.loads(first, allow_nan=True)
    except ValueError:
        return False
    return isinstance(row, dict) and "server_info" not in row and "model_id" in row and "request_throughput" in row


def parse_serve(content: str, given: Given | None = None) -> list[ImportedRun]:
    """A `vllm bench serve` file: one result (`--save-result`), or one a line (`--append-result`)."""
    try:
        bounded_json.loads(content, allow_nan=True)
    except bounded_json.JsonRefused:
        pass  # vllm_bench says why, as for any file it cannot take
    except ValueError:
        if is_result_lines(content):
            return parse_lines(content, given)
    return vllm_bench.parse(content, given)


def parse_lines(content: str, given: Given | None = None) -> list[ImportedRun]:
    """`vllm bench serve --append-result`: one result JSON a line."""
    records: list[tuple[int, Any]] = []
    for n, text in enumerate(content.splitlines(), start=1):
        if not text.strip():
            continue
        try:
            records.append((n, bounded_json.loads(text, allow_nan=True)))
        except ValueError as exc:
            raise ResultFileError([f"line {n}: not JSON ({str(exc)[:80]})"]) from None
        if len(records) > MAX_LINES:
            raise ResultFileError([f"at most {MAX_LINES} result lines are accepted"])
    return _merged(records, given, "line", "vllm bench serve")


def _merged(records: list[tuple[int, Any]], given: Given | None, unit: str, tool: str) -> list[ImportedRun]:
    """Each record read as a `vllm bench serve` result (its errors named by its line, or its index in a list), then
    one run per server whose cells are all the records' cells, a concurrency seen again a further pass."""
    errors: list[str] = []
    runs: dict[tuple, ImportedRun] = {}
    for n, record in records:
        where = f"line {n}: " if unit == "line" else f"line 1: [{n}]."
        if not isinstance(record, dict):
            errors.append(f"{where.rstrip('. ')}: not a JSON object")
            continue
        if record.get("run_number") == -1:
            errors.append(f"{where}run_number: -1, a warm-up run, which the sweep leaves out of its summary")
            continue
        # The sweep's parameters land under the names its JSON gave them; the CLI's "-" spelling is vLLM's "_" one.
        record = {k.replace("-", "_"): v for k, v in reversed(record.items())}
        try:
            (run,) = vllm_bench.parse(json.dumps(record), given)
        except ResultFileError as exc:
            errors.extend(where + error.removeprefix("line 1: ") for error in exc.errors)
            continue
        cells = [replace(cell, line=n if unit == "line" else n + 1) for cell in run.cells]
        if run.server.key in runs:
            runs[run.server.key].cells.extend(cells)
        else:
            runs[run.server.key] = replace(run, cells=cells, tool=tool)
        if len(errors) >= MAX_ERRORS:
            break
    if errors:
        raise ResultFileError(errors[:MAX_ERRORS])
    if not runs:
        raise ResultFileError(["the file holds no result"])
    return list(runs.values())


def _csv_records(content: str) -> list[tuple[int, Any]]:
    """The summary's rows as the records they were written from: numbers back to numbers, a nested value back from
    Python's repr (literals only, bounded), an empty cell (pandas' NaN) left out."""
    reader = csv.reader(io.StringIO(content.lstrip("\ufeff")))
    try:
        header = next(reader)
    except (StopIteration, csv.Error):
        raise ResultFileError(["line 1: not a CSV header"]) from None
    records: list[tuple[int, Any]] = []
    try:
        for row in reader:
            if not any(row):
                continue
            if len(records) >= MAX_LINES:
                raise ResultFileError([f"at most {MAX_LINES} result lines are accepted"])
            values = {name: _value(text) for name, text in zip(header[1:], row[1:], strict=False) if text != ""}
            # A per-request list too long to read back is left out; any other value not read back stays text, so
            # a setting written oddly is refused as the reader's field, never read as absent.
            record = {k: v for k, v in values.items() if not (k in PER_REQUEST and isinstance(v, str))}
            records.append((reader.line_num, record))
    except csv.Error as exc:
        raise ResultFileError([f"line {reader.line_num}: not CSV ({exc})"]) from None
    return records


def _value(text: str) -> Any:
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(number) and number == int(number) and "." not in text and "e" not in text.lower():
            return int(number)
        return number if math.isfinite(number) else text
    if text[:1] in "[{(" and len(text) <= MAX_TEXT:
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return text
    return {"True": True, "False": False, "None": None}.get(text, text)
