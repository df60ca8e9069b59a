"""The SGLang engine: its launch command, the facts carried by the lines its server logs, the failure a log proves,
the model pairs it refuses, and the adapter the run lifecycle drives it through (`adapter.SGLANG`).

Pure: no Django and no I/O (but for the adapter's few calls to the server's HTTP API), so the orchestrator, the
tests and the simulator agree on one reading of the log. Formats follow ../shared/reference/sglang-interface.md
(§3, §4) for all three eras: 0.4.x-0.5.3 (`Decode batch.`), 0.5.4-0.5.12 (`Decode batch,`) and 0.5.14+ (arg groups,
new capture lines). Nothing here raises on unexpected text: a log is whatever the host wrote, progress-bar debris
included. The facts' types and what is done with them are every engine's (`workers.engines`).
"""

from .failures import find_failure, find_usage_error
from .launch import arg_mismatches, launch_argv, with_adaptive_schedule, with_metrics_enabled
from .loglines import parse_decode_line, parse_line, split_prefix
from .model_checks import (
    OVERRIDE_ENV,
    algorithm_problem,
    context_length_arg,
    context_length_problem,
    vocab_problem,
)

__all__ = [
    "OVERRIDE_ENV",
    "algorithm_problem",
    "arg_mismatches",
    "context_length_arg",
    "context_length_problem",
    "find_failure",
    "find_usage_error",
    "launch_argv",
    "parse_decode_line",
    "parse_line",
    "split_prefix",
    "vocab_problem",
    "with_adaptive_schedule",
    "with_metrics_enabled",
]
