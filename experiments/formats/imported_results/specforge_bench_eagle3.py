"""SpecForge's legacy `benchmarks/bench_eagle3.py` results (pure): the `results_<timestamp>.jsonl` it writes (one
indented JSON object despite the name) for each benchmark (mtbench, gsm8k, ...) run at each `--config-list` entry
`batch_size,steps,topk,num_draft_tokens`.

The file is `{"model": <draft model path> (since SpecForge 34c67a01, 2026-01), "<benchmark>": [{batch_size, steps,
topk, num_draft_tokens, metrics: [{latency, output_throughput, accept_length, accuracy, num_questions, ...}],
num_samples}, ...]}` (bench_eagle3.py `main`, benchmarker/utils.py `BenchmarkMetrics`). Which fields map: each
benchmark is its own profile (its prompts differ), each entry a cell at `batch_size` (the client's threads, its
concurrency), each of its `metrics` a pass; `latency` -> duration, `output_throughput` -> output (and total: the file
counts no input tokens) throughput, `num_questions` -> completed, `accept_length` (output tokens / the server's verify
steps: token-weighted) -> accept length. `steps` 0 is the baseline server; otherwise EAGLE3 with `steps`, `topk`,
`num_draft_tokens` and the draft `model`. The target model is not in the file, so the importer states it; an entry
whose `steps` is null (run with `--skip-launch-server`) needs the server's speculative settings stated as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .. import bounded_json
from .common import (
    DATASET_MAX,
    GIVEN,
    MAX_ERRORS,
    MAX_TEXT,
    SPEC_FIELDS,
    Cell,
    Checker,
    Given,
    ImportedRun,
    ResultFileError,
    is_scalar,
    one_object,
    read_given,
)

TOOL = "specforge bench_eagle3"
STATED_AT = {name: f"given.{name}" for name in GIVEN}
ENTRY_KEYS = frozenset({"batch_size", "steps", "topk", "num_draft_tokens", "metrics"})
MAX_CELLS = 1000


def is_bench_eagle3(row: Any) -> bool:
    """An object whose lists hold bench_eagle3's entries (what `detect` asks)."""
    if not isinstance(row, dict):
        return False
    lists = [v for k, v in row.items() if k != "model"]
    return bool(lists) and all(
        isinstance(v, list) and v and all(isinstance(e, dict) and ENTRY_KEYS <= e.keys() for e in v) for v in lists
    )


def is_answers(first_line: str) -> bool:
    """bench_eagle3's per-prompt answers (`results_<time>_answers.jsonl`, SpecForge 86c528b8 on): a line per
    question with the entry's settings, `question`, `outputs`, `prediction` and `label`."""
    try:
        row = bounded_json.loads(first_line, allow_nan=True)
    except ValueError:
        return False
    return isinstance(row, dict) and {"benchmark", "batch_size", "steps", "question", "prediction"} <= row.keys()


def parse(content: str, given: Mapping[str, Any] | Given) -> list[ImportedRun]:
    if is_answers(content.lstrip().split("\n", 1)[0]):
        raise ResultFileError(
            [
                "line 1: a SpecForge bench_eagle3 answers file (results_<time>_answers.jsonl): the answer to each "
                "prompt, no timings; import the results_<time>.jsonl written beside it"
            ]
        )
    errors: list[str] = []
    check = Checker(1, errors)
    row = one_object(content, TOOL)
    if not isinstance(given, Given):
        given = read_given(given, errors)
    draft = row.get("model")
    if draft is not None and (not isinstance(draft, str) or len(draft) > MAX_TEXT):
        check.fail("model", f"not text of at most {MAX_TEXT} characters (bench_eagle3 writes the draft model's path)")
    benchmarks = {name: entries for name, entries in row.items() if name != "model"}
    if not benchmarks:
        check.fail("", "no benchmark's results: bench_eagle3 writes one list per benchmark (mtbench, gsm8k, ...)")
    runs: dict[tuple, ImportedRun] = {}
    count = 0
    for name, entries in benchmarks.items():
        where = str(name)[:DATASET_MAX]
        if not isinstance(entries, list):
            check.fail(where, "not a list of results")
            continue
        for index, entry in enumerate(entries):
            count += 1
            if count > MAX_CELLS:
                check.fail(where, f"at most {MAX_CELLS} results are accepted")
                break
            for run_cells in _read_entry(entry, f"{where}[{index}]", draft, check, given):
                server, cells = run_cells
                run = runs.get((where, server.key))
                if run is None:
                    run = runs[(where, server.key)] = _run(where, server, given, cells[0].metrics)
                run.cells.extend(cells)
        if len(errors) >= MAX_ERRORS:
            break
    if errors:
        raise ResultFileError(errors[:MAX_ERRORS])
    return list(runs.values())


def _read_entry(entry: Any, where: str, draft: Any, check: Checker, given: Given) -> list[tuple[Any, list[Cell]]]:
    if not isinstance(entry, dict):
        check.fail(where, "not an object")
        return []
    before = len(check.errors)
    batch = check.integer(entry, "batch_size", prefix=where + ".", minimum=1)
    steps = check.integer(entry, "steps", prefix=where + ".", optional=True)
    said: dict[str, Any] = {}
    if steps == 0:
        said["speculative_algorithm"] = ""  # "1,0,0,0": the server launched without speculation
        # What the importer states of the draft is for the file's speculative entries, not its baseline.
        given = replace(given, **dict.fromkeys(SPEC_FIELDS[1:]))
    elif steps is not None:
        # bench_eagle3 launches `--speculative-algorithm EAGLE3` with the entry's settings and the draft `model`.
        said = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": steps}
        said["speculative_eagle_topk"] = check.integer(entry, "topk", prefix=where + ".", minimum=1)
        said["speculative_num_draft_tokens"] = check.integer(entry, "num_draft_tokens", prefix=where + ".", minimum=1)
        said["speculative_draft_model_path"] = draft[:MAX_TEXT] if isinstance(draft, str) and draft else None
    stated_at = {**STATED_AT, "speculative_algorithm": f"{where}.steps", "speculative_num_steps": f"{where}.steps"}
    stated_at |= {
        "speculative_eagle_topk": f"{where}.topk",
        "speculative_num_draft_tokens": f"{where}.num_draft_tokens",
    }
    stated_at["speculative_draft_model_path"] = "model"
    server = given.server(
        check, said, where=stated_at, why="a SpecForge bench_eagle3 file names the draft model, not the target"
    )
    if steps is None and server is not None and not server.speculative and given.speculative_algorithm is None:
        check.fail(
            f"{where}.steps",
            "null (run with --skip-launch-server): the file does not say how the server speculated; state "
            "`speculative_algorithm` (NONE for none) and its settings / --speculative-algorithm",
        )
    concurrency = given.resolve("concurrency", batch, check, where=f"{where}.batch_size")
    metrics = entry.get("metrics")
    if not isinstance(metrics, list) or not metrics:
        check.fail(f"{where}.metrics", "missing or empty (bench_eagle3 writes one object per run)")
        return []
    cells = []
    for n, measured in enumerate(metrics):
        cell = _cell(measured, f"{where}.metrics[{n}]", concurrency, entry, check)
        if cell is not None:
            cells.append(cell)
    if len(check.errors) > before or server is None or not cells:
        return []
    return [(server, cells)]


def _cell(measured: Any, where: str, concurrency: int | None, entry: dict, check: Checker) -> Cell | None:
    if not isinstance(measured, dict):
        check.fail(where, "not an object")
        return None
    before = len(check.errors)
    prefix = where + "."
    latency = check.number(measured, "latency", prefix=prefix)
    throughput = check.number(measured, "output_throughput", prefix=prefix)
    questions = check.integer(measured, "num_questions", prefix=prefix, minimum=1)
    accept = check.number(measured, "accept_length", prefix=prefix, optional=True)
    if latency == 0:
        check.fail(prefix + "latency", "zero: no throughput can be read")
    if len(check.errors) > before or latency is None or throughput is None or questions is None or not concurrency:
        return None
    raw = {k: v for k, v in measured.items() if k not in ("latency", "output_throughput") and is_scalar(v)}
    raw |= {k: v for k, v in entry.items() if k != "metrics" and is_scalar(v)}
    raw["total_throughput_counts"] = "output tokens only: the file holds no input token count"
    metrics = {
        "duration_s": latency,
        "completed": questions,
        "output_throughput": throughput,
        "total_throughput": throughput,
        "request_throughput": questions / latency,
        # A baseline server reports no verify steps and bench_eagle3 writes 1.0: no acceptance was measured.
        "accept_length": accept if entry.get("steps") else None,
    }
    return Cell(concurrency=concurrency, line=1, metrics=metrics, raw=raw)


def _run(benchmark: str, server: Any, given: Given, metrics: dict[str, Any]) -> ImportedRun:
    output_len = max(1, round(metrics["output_throughput"] * metrics["duration_s"] / metrics["completed"]))
    return ImportedRun(
        tool=TOOL,
        version="",
        command="",
        server=server,
        server_args={},
        dataset=benchmark,
        input_len=1,
        output_len=output_len,
        num_prompts=metrics["completed"],
        cells=[],
        engine=given.engine or "sglang",  # bench_eagle3 launches and measures an SGLang server
    )
