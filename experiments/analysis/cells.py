"""Per config and concurrency, the cells of measured passes as a page shows them: the mean with its 95% interval
(the throughput and accept-length charts) and the latency table; the experiment page and Compare both read them."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from experiments.analysis import Point, mean_interval

LATENCY_STATS = ("mean", "p99")
LATENCY_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms")
LATENCY_COLUMNS = tuple(f"{stat}_{metric}" for metric in LATENCY_METRICS for stat in LATENCY_STATS)
# The folded latency table: the client's statistics, then the server's own mean end-to-end latency (the gap between
# the two E2E means is what the network and the client added). The page's script reads the order from the header.
SERVER_E2E = "server_mean_e2e_latency_ms"
LATENCY_TABLE_HEADINGS = (
    ("config", "Config"),
    ("concurrency", "Concurrency"),
    ("n", "n"),
    ("mean_ttft_ms", "TTFT mean"),
    ("p99_ttft_ms", "TTFT p99"),
    ("mean_tpot_ms", "TPOT mean"),
    ("p99_tpot_ms", "TPOT p99"),
    ("mean_itl_ms", "ITL mean"),
    ("p99_itl_ms", "ITL p99"),
    ("mean_e2e_latency_ms", "E2E mean"),
    ("p99_e2e_latency_ms", "E2E p99"),
    (SERVER_E2E, "Server E2E mean"),
)


def points_series(
    cells: Iterable[tuple[str, int, float | None]], config_names: Sequence[str], *, positive: bool = False
) -> dict[str, list[Point]]:
    """Per config (in `config_names` order, others after) the mean and 95% interval at each concurrency.

    The interval is of the mean over every pass of every launch, the same samples the speedup uses; a cell
    with one sample has none. With `positive`, the lower bound is clipped at 0 (an accept length cannot be
    negative, whatever the spread says). Configs without values are left out.
    """
    grouped: dict[str, dict[int, list[float]]] = {name: {} for name in config_names}
    for name, level, value in cells:
        if value is not None and name in grouped:
            grouped[name].setdefault(level, []).append(value)
    series: dict[str, list[Point]] = {}
    for name, by_level in grouped.items():
        points = []
        for level in sorted(by_level):
            mean, low, high = mean_interval(by_level[level])
            if positive and low is not None:
                low = max(low, 0.0)
            points.append((level, mean, low, high))
        if points:
            series[name] = points
    return series


def latency_table(usable: list[dict[str, Any]], config_names: Sequence[str]) -> list[dict[str, Any]]:
    """Per config and concurrency: the mean over passes of each latency statistic (mean and p99 per metric)."""
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for m in usable:
        cells.setdefault((m["run__config__name"], m["concurrency"]), []).append(m)
    order = {name: i for i, name in enumerate(config_names)}
    table = []
    for (name, level), group in sorted(cells.items(), key=lambda item: (order.get(item[0][0], 1 << 30), item[0][1])):
        row: dict[str, Any] = {"config": name, "concurrency": level, "n": len(group)}
        for column in (*LATENCY_COLUMNS, SERVER_E2E):
            present = [m[column] for m in group if m.get(column) is not None]
            row[column] = round(statistics.fmean(present), 3) if present else None
        table.append(row)
    return table
