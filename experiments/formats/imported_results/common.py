"""What every result file reader shares (pure): the run, cell and server a file becomes, the checker whose every
error names the line and the field, and the readers of a cell's numbers."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from .. import bounded_json, request_details

MAX_LINES = 10_000
MAX_ERRORS = 20  # a file that is wrong everywhere is refused with its first errors, not thousands
MAX_TEXT = 512  # a path, a version or a command line from a file, bounded
DATASET_MAX = 32  # BenchmarkProfile.dataset

INTEGERS = frozenset({"completed", "failed"})
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


def one_object(content: str, tool: str) -> dict[str, Any]:
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


def read_cell(
    row: dict[str, Any], check: Checker, required: dict[str, str], optional: dict[str, str], *, concurrency_key: str
) -> Cell | None:
    before = len(check.errors)
    concurrency = check.integer(row, concurrency_key, minimum=1)
    metrics: dict[str, Any] = {}
    for source, target in (*required.items(), *optional.items()):
        reader = check.integer if target in INTEGERS else check.number
        metrics[target] = reader(row, source, optional=source not in required)
    requests = request_details.request_rows(row, check.fail)  # with --output-details / --save-detailed
    if len(check.errors) > before or concurrency is None:
        return None
    if requests is not None:
        metrics["requests"] = requests
    mapped = {concurrency_key, *required, *optional, "server_info"}
    raw = {k: v for k, v in row.items() if k not in mapped and is_scalar(v)}
    return Cell(concurrency=concurrency, line=check.line, metrics=metrics, raw=raw)


class Checker:
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


def length(explicit: Any, row: dict[str, Any], total_key: str) -> int:
    """A profile's length: the tool's flag when it wrote it, else the mean tokens per completed request."""
    if isinstance(explicit, int) and not isinstance(explicit, bool) and explicit > 0:
        return explicit
    total, completed = row.get(total_key), row.get("completed")
    if isinstance(total, int | float) and isinstance(completed, int | float) and completed > 0 and total > 0:
        return max(1, round(total / completed))
    return 1


def num_prompts(row: dict[str, Any]) -> int:
    value = row.get("num_prompts")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    completed, failed = row.get("completed"), row.get("failed")
    count = int(completed) if isinstance(completed, int | float) else 0
    count += int(failed) if isinstance(failed, int) and not isinstance(failed, bool) else 0
    return max(1, count)


def text_of(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = " ".join(value)
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def is_scalar(value: Any) -> bool:
    """What a raw cell keeps: numbers and short texts; the per-request lists of `--output-details` are dropped."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, bool | int) or (isinstance(value, str) and len(value) <= MAX_TEXT)


def is_plain(value: Any) -> bool:
    """A server arg worth keeping: a scalar, or a small list or object without NaN or infinities (JSON has none)."""
    if not isinstance(value, list | dict):
        return is_scalar(value)
    try:
        return len(json.dumps(value, allow_nan=False, default=str)) <= MAX_TEXT
    except ValueError:
        return False
