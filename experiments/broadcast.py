"""The only module that knows channel-layer group names and the shape of the events sent to browsers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

if TYPE_CHECKING:
    from .models import Run


def run_group(run_id: int) -> str:
    return f"run-{run_id}"


def experiment_group(experiment_id: int) -> str:
    return f"experiment-{experiment_id}"


def log_lines_event(first_line: int, lines: list[str]) -> dict[str, Any]:
    return {"type": "log.lines", "first": first_line, "lines": lines}


def run_facts_event(decode: list[dict[str, Any]], metrics: dict[str, list[list[float]]]) -> dict[str, Any]:
    return {"type": "run.facts", "decode": decode, "metrics": metrics}


def run_state_event(run: Run) -> dict[str, Any]:
    return {
        "type": "run.state",
        "run": run.pk,
        "state": run.state,
        "loading_progress": run.loading_progress,
        "failure": run.failure(),
        "phases": run.phases(),
        "benchmark_cell": run.benchmark_cell,
        "cancel_requested": run.cancel_requested,
    }


async def send_log_lines(run_id: int, first_line: int, lines: list[str]) -> None:
    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(run_group(run_id), log_lines_event(first_line, lines))


async def send_run_facts(run_id: int, decode: list[dict[str, Any]], metrics: dict[str, list[list[float]]]) -> None:
    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(run_group(run_id), run_facts_event(decode, metrics))


def send_run_state(run: Run) -> None:
    layer = get_channel_layer()
    assert layer is not None
    event = run_state_event(run)
    async_to_sync(layer.group_send)(run_group(run.pk), event)
    async_to_sync(layer.group_send)(experiment_group(run.experiment_id), event)
