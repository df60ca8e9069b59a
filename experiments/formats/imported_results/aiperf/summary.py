"""AIPerf's summary (profile_export_aiperf.json) and its CSV (profile_export_aiperf.csv), read into a `Part`:
exporters/metrics_json_exporter.py, exporters/metrics_csv_exporter.py and common/models/export_models.py
(JsonExportData) of AIPerf 0.13; the benchmark config it states (`config_facts`) in 0.13's and 0.3's shapes."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping
from typing import Any

from ..common import MAX_LINES, MAX_TEXT, Checker, measured_at, text_of
from .part import CSV, LATENCIES, STATS, SUMMARY, TO_MS, Part, is_metric

THROUGHPUTS = {
    "output_token_throughput": ("output_throughput", "tokens/sec"),
    "input_token_throughput": ("input_throughput", "tokens/sec"),
    "total_token_throughput": ("total_throughput", "tokens/sec"),
    "request_throughput": ("request_throughput", "requests/sec"),
}
# Speculative decoding, where the server reported it per request (vLLM's --per-request-spec-decode-metrics;
# metrics/types/spec_decode_metrics.py): AIPerf's 1 + accepted / steps pooled over the requests, and its mean of
# the requests' own.
SPEC_METRICS = {
    "spec_decode_token_weighted_acceptance_length": "accept_length",
    "spec_decode_acceptance_length": "mean_request_accept_length",
}
# The CSV's headers (each metric's `header`, its unit after it) -> the summary JSON's keys.
CSV_HEADERS = {
    "Time to First Token": "time_to_first_token",
    "Inter Token Latency": "inter_token_latency",
    "Inter Chunk Latency": "inter_chunk_latency",
    "Request Latency": "request_latency",
    "Output Token Throughput": "output_token_throughput",
    "Input Token Throughput": "input_token_throughput",
    "Total Token Throughput": "total_token_throughput",
    "Request Throughput": "request_throughput",
    "Request Count": "request_count",
    "Error Request Count": "error_request_count",
    "Benchmark Duration": "benchmark_duration",
    "Total Input Sequence Length": "total_isl",
    "Input Sequence Length": "input_sequence_length",
    "Output Sequence Length": "output_sequence_length",
    "Acceptance Length": "spec_decode_acceptance_length",
    "Token-Weighted Acceptance Length": "spec_decode_token_weighted_acceptance_length",
}


def read_summary(name: str, row: dict[str, Any], errors: list[str]) -> Part | None:
    check = Checker(1, errors)
    before = len(errors)
    part = Part(SUMMARY, name)
    stat = _Stats(row, check)
    part.metrics["duration_s"] = stat.seconds("benchmark_duration")
    part.metrics["completed"] = stat.count("request_count")
    part.metrics["failed"] = stat.count("error_request_count", optional=True) or 0
    for key, (target, unit) in THROUGHPUTS.items():
        part.metrics[target] = stat.rate(
            key, unit, optional=key not in ("output_token_throughput", "request_throughput")
        )
    for key, metric in LATENCIES.items():
        stat.latency(key, metric, part)
    for key, target in SPEC_METRICS.items():
        part.metrics[target] = stat.ratio(key)
    if len(errors) > before:
        return None
    if part.metrics["total_throughput"] is None:
        # Before total_token_throughput (0.1), its parts: the output's and the input's over the duration.
        isl = stat.plain("total_isl")
        duration = part.metrics["duration_s"]
        if part.metrics["input_throughput"] is None and isl is not None and duration:
            part.metrics["input_throughput"] = isl / duration
        part.metrics["total_throughput"] = part.metrics["output_throughput"] + (part.metrics["input_throughput"] or 0)
    part.raw.update(stat.extras())
    part.facts.update(config_facts(row.get("input_config"), check))
    osl, isl = stat.plain("output_sequence_length"), stat.plain("input_sequence_length")
    part.facts.setdefault("output_len", round(osl) if osl else None)
    part.facts.setdefault("input_len", round(isl) if isl else None)
    part.facts["num_prompts"] = part.metrics["completed"] + part.metrics["failed"]
    part.facts["benchmark_id"] = row.get("benchmark_id") if isinstance(row.get("benchmark_id"), str) else None
    part.facts["version"] = text_of(row.get("aiperf_version"))
    part.facts["measured_at"] = measured_at(row.get("start_time"))
    info = row.get("run_info")
    if isinstance(info, dict) and info.get("cli_command"):
        part.facts["command"] = text_of(info.get("cli_command"))
    if row.get("was_cancelled") is True or row.get("is_complete") is False:
        check.fail("was_cancelled" if row.get("was_cancelled") else "is_complete", _INCOMPLETE)
    return part if len(errors) == before else None


_REQUIRED_RATES = ("output_token_throughput", "request_throughput")
_INCOMPLETE = "the benchmark did not finish (AIPerf marks it incomplete): its numbers are not a whole run's"


class _Stats:
    """Reads the summary's metrics `{unit, avg, ...}`, each error naming the metric and its stat."""

    def __init__(self, row: dict[str, Any], check: Checker) -> None:
        self.row, self.check = row, check
        self.used: set[str] = set()

    def _metric(self, key: str, optional: bool) -> dict[str, Any] | None:
        self.used.add(key)
        value = self.row.get(key)
        if value is None:
            if not optional:
                self.check.fail(key, "missing: AIPerf writes it for every finished run; export the whole summary")
            return None
        if not is_metric(value):
            self.check.fail(key, "not an AIPerf metric ({unit, avg, ...})")
            return None
        return value

    def _value(self, key: str, metric: dict[str, Any], stat: str) -> float | None:
        return self.check.number(metric, stat, prefix=f"{key}.", optional=True)

    def plain(self, key: str) -> float | None:
        metric = self._metric(key, True)
        return None if metric is None else self._value(key, metric, "avg")

    def seconds(self, key: str) -> float | None:
        metric = self._metric(key, False)
        if metric is None:
            return None
        factor = self._unit(key, metric, TO_MS)
        value = self._value(key, metric, "avg")
        if value is None or factor is None:
            return None
        if value == 0:
            self.check.fail(f"{key}.avg", "zero: no throughput can be read")
            return None
        return value * factor / 1000.0

    def count(self, key: str, *, optional: bool = False) -> int | None:
        metric = self._metric(key, optional)
        value = None if metric is None else self._value(key, metric, "avg")
        if value is None:
            if metric is not None and not optional:
                self.check.fail(f"{key}.avg", "missing")
            return None
        if value != int(value):
            self.check.fail(f"{key}.avg", "not a whole number of requests")
            return None
        return int(value)

    def rate(self, key: str, unit: str, *, optional: bool) -> float | None:
        metric = self._metric(key, optional)
        if metric is None:
            return None
        if metric["unit"] != unit:
            self.check.fail(f"{key}.unit", f"{metric['unit'][:40]!r}, where AIPerf writes {unit!r}")
            return None
        value = self._value(key, metric, "avg")
        if value is None and not optional:
            self.check.fail(f"{key}.avg", "missing")
        return value

    def ratio(self, key: str) -> float | None:
        metric = self._metric(key, True)
        return None if metric is None else self._value(key, metric, "avg")

    def latency(self, key: str, name: str, part: Part) -> None:
        metric = self._metric(key, True)
        if metric is None:
            return
        factor = self._unit(key, metric, TO_MS)
        if factor is None:
            return
        for stat, target in STATS.items():
            value = self._value(key, metric, stat)
            part.metrics[f"{target}_{name}_ms"] = None if value is None else value * factor
        for stat in ("std", "p95"):
            value = self._value(key, metric, stat)
            if value is not None:
                part.raw[f"{stat}_{name}_ms"] = value * factor

    def _unit(self, key: str, metric: dict[str, Any], units: Mapping[str, float]) -> float | None:
        factor = units.get(metric["unit"])
        if factor is None:
            self.check.fail(f"{key}.unit", f"{metric['unit'][:40]!r} is not a unit of time ({', '.join(units)})")
        return factor

    def extras(self) -> dict[str, Any]:
        """AIPerf's own metrics without a column, by their name: each one's average (with its unit's name)."""
        out: dict[str, Any] = {}
        for key, value in self.row.items():
            if key in self.used or not is_metric(value) or len(out) >= 64:
                continue
            avg = value.get("avg")
            if isinstance(avg, int | float) and not isinstance(avg, bool) and math.isfinite(avg):
                out[f"aiperf_{key[:60]}"] = avg
        return out


def config_facts(config: Any, check: Checker) -> dict[str, Any]:
    """The model, concurrency and request shape the benchmark's config states (0.13's BenchmarkConfig, or the
    UserConfig of 0.1-0.3), None where it states none; `where` names each one's field for a refusal."""
    facts: dict[str, Any] = {"where": {}}
    if not isinstance(config, dict) or not config:
        return facts
    models = _model_names(config)
    if len(models) > 1:
        check.fail("input_config.models", f"{len(models)} models: specdash files one model's run; import one each")
    elif models:
        facts["model_path"] = models[0][:MAX_TEXT]
    facts["where"]["model_path"] = "input_config.models" if "models" in config else "input_config.endpoint.model_names"
    phases = config.get("phases")
    if isinstance(phases, list):
        measured = [(i, p) for i, p in enumerate(phases) if isinstance(p, dict) and p.get("kind") != "warmup"]
        levels = {p.get("concurrency") for _, p in measured}
        if len(levels) > 1:
            check.fail(
                "input_config.phases",
                "profiling phases at several concurrencies: import each phase's phases/<name>/"
                "profile_export_aiperf.json with its concurrency stated",
            )
        elif measured:
            index, phase = measured[0]
            facts["concurrency"] = _whole(phase.get("concurrency"))
            facts["where"]["concurrency"] = f"input_config.phases[{index}].concurrency"
    else:
        loadgen = config.get("loadgen")
        if isinstance(loadgen, dict):
            facts["concurrency"] = _whole(loadgen.get("concurrency"))
        facts["where"]["concurrency"] = "input_config.loadgen.concurrency"
    datasets = config.get("datasets")
    if isinstance(datasets, list) and datasets and isinstance(datasets[0], dict):
        prompts = datasets[0].get("prompts")
        if isinstance(prompts, dict):
            facts["input_len"] = _mean(prompts.get("isl"))
            facts["output_len"] = _mean(prompts.get("osl"))
        facts["dataset"] = text_of(datasets[0].get("type"))
    user_input = config.get("input")
    if isinstance(user_input, dict) and isinstance(user_input.get("prompt"), dict):  # UserConfig, before 0.4
        facts["input_len"] = _mean(user_input["prompt"].get("input_tokens"))
        facts["output_len"] = _mean(user_input["prompt"].get("output_tokens"))
        facts["dataset"] = text_of(user_input.get("custom_dataset_type")) if user_input.get("file") else "synthetic"
    facts["command"] = text_of(config.get("cli_command")) or None
    return {k: v for k, v in facts.items() if v is not None}


def _model_names(config: dict[str, Any]) -> list[str]:
    models = config.get("models", config.get("model"))
    if isinstance(models, dict):
        models = models.get("items")
    if models is None and isinstance(config.get("endpoint"), dict):
        models = config["endpoint"].get("model_names")
    if isinstance(models, str):
        models = [models]
    if not isinstance(models, list):
        return []
    names = [m.get("name") if isinstance(m, dict) else m for m in models]
    return [n for n in names if isinstance(n, str) and n.strip()]


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _mean(value: Any) -> int | None:
    mean = value.get("mean") if isinstance(value, dict) else None
    if isinstance(mean, int | float) and not isinstance(mean, bool) and math.isfinite(mean) and mean >= 1:
        return round(mean)
    return None


_HEADER = re.compile(r"^(?P<name>.*?)(?: \((?P<unit>[^()]*)\))?$")


def read_csv(name: str, text: str, errors: list[str]) -> Part | None:
    """The CSV as the summary JSON it was written from: its rows by header (unit in the header), two decimals."""
    row: dict[str, Any] = {}
    columns: list[str] = []
    for n, cells in enumerate(csv.reader(text.splitlines()[:MAX_LINES]), start=1):
        if not cells:
            continue
        if cells[0] in ("Metric", "Endpoint"):
            columns = [c.strip() for c in cells]
            if cells[0] == "Endpoint":
                break  # the GPU telemetry section: nothing specdash reads
            continue
        match = _HEADER.match(cells[0].strip())
        key = CSV_HEADERS.get(match["name"]) if match else None
        if match is None or key is None or not columns:
            continue
        # AIPerf leaves the unit out of a count's header ("Request Count").
        metric: dict[str, Any] = {"unit": match["unit"] or "requests"}
        for column, cell in zip(columns[1:], cells[1:], strict=False):
            if cell.strip():
                try:
                    metric["avg" if column == "Value" else column] = float(cell)
                except ValueError:
                    Checker(n, errors).fail(f"{cells[0][:60]}.{column}", "not a number")
        row[key] = metric
    if errors:
        return None
    part = read_summary(name, {**row, "input_config": {}}, errors)
    if part is not None:
        part.kind = CSV
        part.raw["aiperf_csv_rounding"] = "AIPerf's CSV rounds each figure to two decimals"
    return part
