"""What an import says, in one sentence an experiment's page leads with (pure): the source tool and its version, and
per config the throughput, latency and acceptance its file reported, at each concurrency, as the file has them.

An imported experiment often has no comparison to lead with (one server imported alone, or no baseline beside it);
this sentence is then its answer, and beside a comparison it says where the numbers came from. Each config's
figures are its latest imported run's (a night's import of many runs says which and how many), each concurrency the
mean of that run's passes: for a file of one line per level, the file's own numbers."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

MAX_LEVELS = 4  # concurrencies named per config; the rest are counted
MAX_CONFIGS = 4
# The tools' names as their projects write them (the readers' `tool` is lower case).
TOOL_NAMES = {
    "sglang bench_serving": "SGLang bench_serving",
    "vllm bench serve": "vLLM bench serve",
    "vllm bench sweep": "vLLM bench sweep",
    "specforge benchmark": "SpecForge benchmark",
    "aiperf": "NVIDIA AIPerf",
    "guidellm": "GuideLLM",
    "genai-bench": "genai-bench",
}
# The accept length a cell has, in the order the page prefers, with the words that say which figure it is.
ACCEPTANCE = (
    ("accept_length", "accept length"),
    ("pooled_accept_length", "accept length (pooled)"),
    ("server_accept_length", "server accept length"),
    ("mean_request_accept_length", "mean request accept length"),
)


@dataclass(frozen=True)
class ImportedRunFacts:
    run_id: int
    config: str
    tool: str
    version: str
    measured_at: datetime | None


def tool_label(tool: str, version: str) -> str:
    name = TOOL_NAMES.get(tool.lower(), tool)
    return f"{name} {version}".strip()


def imported_summary(runs: Sequence[ImportedRunFacts], cells: Iterable[Mapping[str, Any]]) -> str | None:
    """The sentence, or None when no imported run has a measured cell. `cells`: measurement values with `run_id`,
    `concurrency`, `output_throughput` and, where measured, the latency and acceptance columns."""
    if not runs:
        return None
    by_run: dict[int, list[Mapping[str, Any]]] = {}
    for cell in cells:
        if cell.get("output_throughput"):
            by_run.setdefault(cell["run_id"], []).append(cell)
    latest: dict[str, ImportedRunFacts] = {}
    count: dict[str, int] = {}
    for run in runs:
        if run.run_id not in by_run:
            continue
        count[run.config] = count.get(run.config, 0) + 1
        held = latest.get(run.config)
        if held is None or _when(run) >= _when(held):
            latest[run.config] = run
    if not latest:
        return None
    sources = ", ".join(dict.fromkeys(tool_label(r.tool, r.version) for r in latest.values()))
    parts = []
    for config, run in list(latest.items())[:MAX_CONFIGS]:
        part = f"{config} {_levels(by_run[run.run_id])}"
        if count[config] > 1 and run.measured_at is not None:
            part += f" (the latest of {count[config]} imported runs, measured {run.measured_at:%Y-%m-%d})"
        parts.append(part)
    more = len(latest) - MAX_CONFIGS
    tail = f"; and {more} more config{'s' if more > 1 else ''}" if more > 0 else ""
    return f"Imported from {sources}: {'; '.join(parts)}{tail}."


def _when(run: ImportedRunFacts) -> float:
    return run.measured_at.timestamp() if run.measured_at is not None else float("-inf")


def _levels(cells: list[Mapping[str, Any]]) -> str:
    levels: dict[int, list[Mapping[str, Any]]] = {}
    for cell in cells:
        levels.setdefault(cell["concurrency"], []).append(cell)
    said = [_level(concurrency, levels[concurrency]) for concurrency in sorted(levels)[:MAX_LEVELS]]
    more = len(levels) - MAX_LEVELS
    return ", ".join(said) + (f" and {more} more concurrenc{'ies' if more > 1 else 'y'}" if more > 0 else "")


def _level(concurrency: int, cells: list[Mapping[str, Any]]) -> str:
    throughput = _mean(cells, "output_throughput")
    assert throughput is not None
    figures = []
    for key, label in (("mean_tpot_ms", "TPOT"), ("mean_ttft_ms", "TTFT")):
        if (value := _mean(cells, key)) is not None:
            figures.append(f"{label} {value:,.1f} ms")
    for key, label in ACCEPTANCE:
        if (value := _mean(cells, key)) is not None:
            figures.append(f"{label} {value:.2f}")
            break
    shown = f"{throughput:,.0f}" if throughput >= 100 else f"{throughput:,.1f}"
    return f"{shown} tok/s at c={concurrency}" + (f" ({', '.join(figures)})" if figures else "")


def _mean(cells: list[Mapping[str, Any]], key: str) -> float | None:
    values = [cell[key] for cell in cells if isinstance(cell.get(key), int | float) and cell[key] > 0]
    return statistics.fmean(values) if values else None
