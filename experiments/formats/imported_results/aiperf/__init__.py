"""NVIDIA AIPerf exports (pure): the files `aiperf profile` writes into its artifact folder, each read alone or
several of one benchmark together (`read_run`), into one run of one cell: one model at one concurrency.

Read from AIPerf's own source (0.13.0 wheel, `aiperf/<path>`; 0.1.1 at github ai-dynamo/aiperf) and checked on files
AIPerf 0.13 wrote against the simulated host (experiments/tests/data/aiperf-0.13/):
- `profile_export_aiperf.json` (exporters/metrics_json_exporter.py, common/models/export_models.py JsonExportData):
  each metric a top-level `{unit, avg, min, max, p1..p99, std, count, sum}`, beside `input_config` (the benchmark
  config: `models`, `phases[].concurrency`, `datasets[].prompts`; before 0.4 the CLI's UserConfig:
  `endpoint.model_names`, `loadgen.concurrency`, `input.prompt`), `run_info`, `start_time`, and from schema 1.0
  `schema_version`, `aiperf_version`, `benchmark_id`.
- `profile_export.jsonl` (common/models/record_models.py MetricRecordInfo): one `{metadata, metrics, error?}` per
  request, each metric `{value, unit}`; the warm-up's requests too, `metadata.benchmark_phase` "warmup".
- `profile_export_aiperf.csv` (exporters/metrics_csv_exporter.py): each metric's header and unit, two decimals; it
  names neither the model nor the concurrency.
- `server_metrics_export.json` (server_metrics/json_exporter.py, common/models/server_metrics_models.py): each
  Prometheus metric scraped over the profiling phase, a counter's `stats.total` its increase (named without
  `_total`).

Two names differ: AIPerf's inter_token_latency, (latency - TTFT) / (output tokens - 1), is specdash's TPOT and its
inter_chunk_latency (the gap between chunks) specdash's ITL. And its "Accept Length" (exporters/sglang/
speculative_decoding_console_exporter.py) is the mean of the server's sglang:spec_accept_length gauge over the run,
a window value that reads 0 before the first decode: kept raw under its own name, while specdash's pooled figure is
the counters' increase, generation tokens / verify calls, from the same export.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import bounded_json
from ..common import DATASET_MAX, MAX_ERRORS, MAX_TEXT, Cell, Checker, Given, ImportedRun, ResultFileError
from .part import CSV, NAMES, RECORDS, SERVER_METRICS, SUMMARY, Part, kind_of
from .records import read_records
from .server_metrics import read_server_metrics
from .summary import read_csv, read_summary


def parse(content: str, given: Given) -> list[ImportedRun]:
    """The run of one AIPerf file alone."""
    return [read_run([("", content)], given)]


def groups(texts: Sequence[str]) -> list[list[int]]:
    """Which of an upload's files (their texts, in order) are the AIPerf files of one benchmark, to be read together
    by `read_run`: each group of two files or more, its primary first (the summary, else the per-request export,
    else the CSV). Files join by the benchmark_id they state; a file that states none (the per-request export and
    the CSV name no benchmark, nor does a summary before 0.9) joins the upload's only AIPerf benchmark, and stays
    alone where there are several (each then needs its model and concurrency stated)."""
    kinds = {i: kind_of(text) for i, text in enumerate(texts)}
    by_id: dict[str, list[int]] = {}
    unnamed: list[int] = []
    for i, kind in kinds.items():
        if kind is None:
            continue
        benchmark = _benchmark_id(texts[i]) if kind in (SUMMARY, SERVER_METRICS) else None
        if benchmark:
            by_id.setdefault(benchmark, []).append(i)
        else:
            unnamed.append(i)
    found = list(by_id.values())
    summaries = [i for i in unnamed if kinds[i] == SUMMARY]
    alone = [kinds[i] for i in unnamed]
    if len(found) + len(summaries) == 1 or (not found and len(alone) == len(set(alone))):
        found = [[*(found[0] if found else []), *unnamed]]
    order = (SUMMARY, RECORDS, CSV, SERVER_METRICS)
    return [sorted(group, key=lambda i: (order.index(kinds[i] or SUMMARY), i)) for group in found if len(group) > 1]


def _benchmark_id(text: str) -> str | None:
    try:
        whole = bounded_json.loads(text, allow_nan=True)
    except ValueError:
        return None
    value = whole.get("benchmark_id") if isinstance(whole, dict) else None
    return value[:MAX_TEXT] if isinstance(value, str) and value else None


def read_run(files: Sequence[tuple[str, str]], given: Given) -> ImportedRun:
    """The one run of the AIPerf files of one benchmark, each (name, text): the summary's cell (else the
    per-request export's, else the CSV's), with the per-request rows of the per-request export and the pooled
    acceptance of the server-metrics export. What no file says, the importer states (`given`); files that disagree
    on the benchmark they measured are refused."""
    errors: list[str] = []
    parts: list[Part] = []
    for index, (name, text) in enumerate(files):
        before = len(errors)
        part = _read_part(name, text, errors)
        if len(errors) > before and index > 0:
            # The group's errors are filed under its first file, which the importer names: the others name theirs.
            errors[before:] = [f"{name[:80]}: {e}" for e in errors[before:]]
        if part is not None:
            parts.append(part)
    if errors:
        raise ResultFileError(errors[:MAX_ERRORS])
    return _joined(parts, given)


def _read_part(name: str, text: str, errors: list[str]) -> Part | None:
    kind = kind_of(text)
    if kind == SUMMARY:
        return read_summary(name, bounded_json.loads(text, allow_nan=True), errors)
    if kind == RECORDS:
        return read_records(name, text, errors)
    if kind == CSV:
        return read_csv(name, text, errors)
    if kind == SERVER_METRICS:
        return read_server_metrics(name, bounded_json.loads(text, allow_nan=True), errors)
    errors.append(
        "line 1: not an AIPerf export: the import reads profile_export_aiperf.json, profile_export.jsonl, "
        "profile_export_aiperf.csv and server_metrics_export.json"
    )
    return None


PRIMARY = (SUMMARY, RECORDS, CSV)


def _joined(parts: list[Part], given: Given) -> ImportedRun:
    errors: list[str] = []
    check = Checker(1, errors)
    by_kind: dict[str, Part] = {}
    for part in parts:
        if part.kind in by_kind:
            errors.append(f"{_called(part)}: a second {NAMES[part.kind]} of one run; import each run's files apart")
        by_kind[part.kind] = part
    primary = next((by_kind[kind] for kind in PRIMARY if kind in by_kind), None)
    if primary is None:
        errors.append(
            f"line 1: metrics: {NAMES[parts[0].kind]} holds the server's counters, not the client's measurements: "
            "import it together with the run's profile_export_aiperf.json (or profile_export.jsonl)"
        )
    ids = {p.facts["benchmark_id"] for p in parts if p.facts.get("benchmark_id")}
    if len(ids) > 1:
        errors.append(f"benchmark_id: the files are of different AIPerf runs ({', '.join(sorted(ids))[:200]})")
    if errors:
        raise ResultFileError(errors[:MAX_ERRORS])
    assert primary is not None
    metrics, raw = dict(primary.metrics), dict(primary.raw)
    facts: dict[str, Any] = {}
    for part in reversed(parts):  # the summary's facts over the others'
        facts.update({k: v for k, v in part.facts.items() if v not in (None, "")})
    facts.update({k: v for k, v in primary.facts.items() if v not in (None, "")})
    records = by_kind.get(RECORDS)
    if records is not None and records is not primary:
        counted = primary.metrics["completed"] + primary.metrics["failed"]
        if counted != len(records.metrics["requests"]):
            errors.append(
                f"{_called(records)}: {len(records.metrics['requests'])} profiling requests, where "
                f"{_called(primary)} counts {counted}: not the same run"
            )
        metrics["requests"] = records.metrics["requests"]
        raw["warmup_requests_dropped"] = records.raw["warmup_requests_dropped"]
        for name in ("accept_length", "mean_request_accept_length"):
            if metrics.get(name) is None:
                metrics[name] = records.metrics.get(name)
    server = by_kind.get(SERVER_METRICS)
    if server is not None:
        metrics.update(server.metrics)
        raw.update(server.raw)
    raw["aiperf_files"] = " + ".join(NAMES[p.kind].rsplit("(", 1)[-1].rstrip(")") for p in parts)[:MAX_TEXT]
    where = facts.get("where", {})
    why = f"{NAMES[primary.kind]} does not name the model"
    said = {"model_path": facts.get("model_path"), **facts.get("spec", {})}
    if facts.get("speculates") and not given.speculative_algorithm:
        check.fail(
            facts["speculates"],
            "the server speculated (its verify calls count up), but no file names the algorithm: state it with "
            "`speculative_algorithm` / --speculative-algorithm (and the draft model with "
            "`speculative_draft_model_path` / --draft-model)",
        )
    if facts.get("spec") and given.speculative_algorithm and given.speculative_eagle_topk is None:
        shown = ", ".join(
            f"{k.removeprefix('speculative_num_').replace('_', ' ')} {v}" for k, v in facts["spec"].items()
        )
        check.fail(
            _SPEC_WHERE["speculative_num_steps"],
            f"the server's gauges give its {shown}, not its draft tree's topk: state it with "
            "`speculative_eagle_topk` / --topk",
        )
    served = given.server(check, said, where={"model_path": where.get("model_path", "model_path"), **_SPEC_WHERE},
                          why=why)  # fmt: skip
    concurrency = given.require(
        "concurrency",
        facts.get("concurrency"),
        check,
        where=where.get("concurrency", "concurrency"),
        why=f"{NAMES[primary.kind]} does not hold it",
    )
    engine = given.resolve("engine", facts.get("engine"), check, where="metrics (the server's metric names)")
    if errors or served is None or concurrency is None:
        raise ResultFileError(errors[:MAX_ERRORS])
    metrics = {k: v for k, v in metrics.items() if v is not None or k in _NULLABLE}
    dataset = (facts.get("dataset") or "aiperf")[:DATASET_MAX]
    return ImportedRun(
        tool="aiperf",
        version=facts.get("version", ""),
        command=facts.get("command", ""),
        server=served,
        server_args={},
        dataset=dataset,
        input_len=facts.get("input_len") or 1,
        output_len=facts.get("output_len") or 1,
        num_prompts=facts.get("num_prompts") or 1,
        cells=[Cell(concurrency=concurrency, line=1, metrics=metrics, raw=raw)],
        engine=engine or "",
        measured_at=facts.get("measured_at", ""),
    )


_SPEC_WHERE = {
    "speculative_num_steps": "metrics.sglang:spec_num_steps",
    "speculative_num_draft_tokens": "metrics.sglang:spec_num_draft_tokens",
}
_NULLABLE = frozenset({"failed"})


def _called(part: Part) -> str:
    return part.name[:80] or NAMES[part.kind]


__all__ = ["CSV", "NAMES", "RECORDS", "SERVER_METRICS", "SUMMARY", "groups", "kind_of", "parse", "read_run"]
