"""What every result file reader shares (pure): the run, cell and server a file becomes, the checker whose every
error names the line and the field, and the readers of a cell's numbers."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from experiments.rules import launch_fields

from .. import bounded_json, request_details

MAX_LINES = 10_000
MAX_ERRORS = 20  # a file that is wrong everywhere is refused with its first errors, not thousands
MAX_TEXT = 512  # a path, a version or a command line from a file, bounded
DATASET_MAX = 32  # BenchmarkProfile.dataset

INTEGERS = frozenset({"completed", "failed"})
# The server's speculative settings, from SGLang's /server_info as bench_serving stored it beside the results: the
# method, then its settings, in the launch fields' order (launch_fields' SGLang rows with a column).
SPEC_FIELDS = tuple(
    row.name
    for row in launch_fields.fields(launch_fields.SGLANG)
    if row.column and (row.speculative or row.name == "speculative_algorithm")
)
# The server's other settings a result file may state.
SERVER_FIELDS = tuple(
    row.name for row in launch_fields.fields(launch_fields.SGLANG) if row.name not in SPEC_FIELDS and row.import_flag
)


# What an importer states that a file does not say, by the same names for every format (the API's `given`, the
# page's fields, the CLI's flags): the served model, the engine that served it, its tp size, its speculative
# settings and the concurrency the client ran at. Each reader takes the file's own value where it says one, the
# given one where it says nothing, and refuses a given value that contradicts the file, naming both.
GIVEN = (*SERVER_FIELDS[:1], "engine", *SERVER_FIELDS[1:], *SPEC_FIELDS, "concurrency")
# The CLI's flag for each (`specdash import --model ...`), named in the refusals so a user knows what to add.
GIVEN_FLAGS = {
    **{row.name: row.import_flag for row in launch_fields.fields(launch_fields.SGLANG) if row.import_flag},
    "engine": "--engine",
    "concurrency": "--concurrency",
}
# The engines a result file can have measured; "other" for an OpenAI-compatible server specdash does not know.
ENGINES = ("sglang", "vllm", "tensorrt-llm", "lmdeploy", "other")
GIVEN_TEXT = frozenset(
    {
        "engine",
        *(
            name
            for name in GIVEN
            if (row := launch_fields.field(launch_fields.SGLANG, name)) and row.kind != launch_fields.INT
        ),
    }
)


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
    # The fields the importer stated (GIVEN's names) rather than the file: a refusal of one names `given`.
    given: frozenset[str] = field(default=frozenset(), compare=False)

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
    engine: str = ""  # one of ENGINES, or "" where neither the file nor the importer says
    # When it was measured, as the file says (bench_serving's `date`, vLLM's `date`), ISO 8601; "" where it does
    # not, and the importer's own time (an archive member's mtime) is used.
    measured_at: str = ""

    @property
    def shape(self) -> tuple[str, int, int, int]:
        """The request shape its cells were measured with: runs of different shapes are never one profile's."""
        return (self.dataset, self.input_len, self.output_len, self.num_prompts)


@dataclass(frozen=True)
class ImportedFile:
    """A file read, as an import files it: its runs, the SHA-256 of its text (a file imported before is skipped)
    and when its importer says it was measured (an archive member's mtime), for runs whose lines say nothing."""

    name: str
    format: str
    runs: list[ImportedRun]
    sha256: str = ""
    measured_at: datetime | None = None


@dataclass(frozen=True)
class Given:
    """What the importer states (`GIVEN`), checked by `read_given`; None where it states nothing."""

    model_path: str | None = None
    engine: str | None = None
    tp_size: int | None = None
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    concurrency: int | None = None

    def stated(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def resolve(self, name: str, said: Any, check: Checker, *, where: str) -> Any:
        """The value of `name`: what the file says (`said`, at its field `where`) wins; the given one where the file
        says nothing (None). A given value that contradicts the file is refused, naming both; the file's is kept."""
        stated = getattr(self, name)
        if said is None or stated is None:
            return stated if said is None else said
        if _same(name, said, stated):
            return said
        check.fail(
            where,
            f"the file says {_shown(said)}, but given {name} (`{name}` / {GIVEN_FLAGS[name]}) says {_shown(stated)}; "
            f"leave {name} out (the file's own value is used) or import another file",
        )
        return said

    def require(self, name: str, said: Any, check: Checker, *, where: str, why: str) -> Any:
        """As `resolve`, and where neither the file nor the importer says it, "<where>: <why>: state <what> with
        `<name>` / <flag>"."""
        value = self.resolve(name, said, check, where=where)
        if value is None:
            check.fail(where, f"{why}: state {_WHAT[name]} with `{name}` / {GIVEN_FLAGS[name]}")
        return value

    def server(self, check: Checker, said: Mapping[str, Any], *, where: Mapping[str, str], why: str) -> Server | None:
        """The server a file measured: its own settings (`said`: GIVEN's server names -> value, None where the file
        says nothing; speculative_algorithm "" where it says none), the importer's where the file is silent, each
        contradiction refused at the file's field (`where`: name -> the field, as "server_info.tp_size"). Only the
        model is required; `why` says why the file does not hold it."""
        before = len(check.errors)
        model = self.require("model_path", said.get("model_path"), check, where=where["model_path"], why=why)
        tp = self.resolve("tp_size", said.get("tp_size"), check, where=where.get("tp_size", "tp_size"))
        spec: dict[str, Any] = {}
        algorithm = self.resolve(
            "speculative_algorithm",
            said.get("speculative_algorithm"),
            check,
            where=where.get("speculative_algorithm", "speculative_algorithm"),
        )
        if algorithm:
            spec["speculative_algorithm"] = str(algorithm).upper()
            for name in SPEC_FIELDS[1:]:
                value = self.resolve(name, said.get(name), check, where=where.get(name, name))
                if value is not None and value != "":
                    spec[name] = value
        elif any(getattr(self, name) is not None for name in SPEC_FIELDS[1:]):
            if algorithm is None:
                check.fail("given", "speculative settings without `speculative_algorithm`: state the algorithm too")
            else:
                check.fail(
                    where.get("speculative_algorithm", "speculative_algorithm"),
                    "the file says the server did not speculate, but given states speculative settings; leave them "
                    "out or import another file",
                )
        if len(check.errors) > before or not isinstance(model, str):
            return None
        from_given = frozenset(n for n in (*SERVER_FIELDS, *SPEC_FIELDS) if said.get(n) is None) & frozenset(
            self.stated()
        )
        return Server(model_path=model[:MAX_TEXT], tp_size=max(1, tp or 1), speculative=spec, given=from_given)


_WHAT = {
    **{row.name: row.import_what for row in launch_fields.fields(launch_fields.SGLANG) if row.import_flag},
    "engine": f"the engine that served it (one of {', '.join(ENGINES)})",
    "concurrency": "the concurrency the client ran at",
}


def _shown(value: Any) -> str:
    return "NONE" if value == "" else repr(value)


def _same(name: str, said: Any, stated: Any) -> bool:
    if name in ("speculative_algorithm", "engine"):
        return str(said).upper() == str(stated).upper()
    if name.endswith("_path"):
        # A trailing slash names the same folder; anything else is another model.
        return str(said).rstrip("/") == str(stated).rstrip("/")
    return bool(said == stated)


def read_given(mapping: Mapping[str, Any] | None, errors: list[str]) -> Given:
    """The importer's statement checked field by field: each unknown name, wrong type or bound is an error
    "given.<name>: ..." appended to `errors` (the field's form checks the rest when the config is made); what is
    refused is left out of the Given. `speculative_algorithm` "NONE" states that the server did not speculate."""
    if mapping is None:
        return Given()
    if not isinstance(mapping, Mapping):
        errors.append(f"given: an object of at most: {', '.join(GIVEN)}")
        return Given()
    values: dict[str, Any] = {}
    for name, value in mapping.items():
        if name not in GIVEN:
            errors.append(f"given.{str(name)[:40]}: not something an import states (one of {', '.join(GIVEN)})")
            continue
        if value is None or value == "":
            continue
        if name in GIVEN_TEXT:
            # Its characters are the config form's to judge (the same rules as a submitted config's).
            if not isinstance(value, str) or len(value) > MAX_TEXT or not value.strip():
                errors.append(f"given.{name}: text of at most {MAX_TEXT} characters")
                continue
            value = value.strip()
            if name == "engine":
                if value.lower() not in ENGINES:
                    errors.append(f"given.engine: one of {', '.join(ENGINES)}")
                    continue
                value = value.lower()
            if name == "speculative_algorithm":
                value = "" if value.upper() == "NONE" else value.upper()
        elif isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
            errors.append(f"given.{name}: a whole number of at least 1")
            continue
        values[name] = value
    return Given(**values)


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
    row: dict[str, Any],
    check: Checker,
    required: dict[str, str],
    optional: dict[str, str],
    *,
    concurrency_key: str,
    given: Given | None = None,
) -> Cell | None:
    """A line's cell. Its concurrency is the line's `concurrency_key`; where the line has none (a run without a
    concurrency limit writes null), the importer's `given.concurrency`, else an error saying to state it."""
    before = len(check.errors)
    said = check.integer(row, concurrency_key, minimum=1, optional=True)
    concurrency = None
    if len(check.errors) == before:
        why = "null (the run had no concurrency limit)" if concurrency_key in row else "absent"
        concurrency = (given or Given()).require("concurrency", said, check, where=concurrency_key, why=why)
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


def measured_at(value: Any) -> str:
    """When a line says it was measured, as ISO 8601: vLLM's `date` ("20250101-120000", local time as the tool
    wrote it, read as UTC) or an ISO 8601 text; "" for anything else (the import's own time is used)."""
    if not isinstance(value, str) or len(value) > 40:
        return ""
    for pattern in ("%Y%m%d-%H%M%S", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M:%S",
                    "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):  # fmt: skip
        try:
            moment = datetime.strptime(value.strip(), pattern)
        except ValueError:
            continue
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.isoformat()
    return ""


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
