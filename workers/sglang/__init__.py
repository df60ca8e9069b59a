"""The SGLang adapter: the launch command, the facts carried by the lines a server logs, the live facts a run's
page shows, the failure a log proves, and the model pairs SGLang refuses.

Pure: no Django and no I/O, so the orchestrator, the tests and the simulator agree on one reading of the
log. Formats follow ../shared/reference/sglang-interface.md (§3, §4) for all three eras: 0.4.x-0.5.3
(`Decode batch.`), 0.5.4-0.5.12 (`Decode batch,`) and 0.5.14+ (arg groups, new capture lines).
Nothing here raises on unexpected text: a log is whatever the host wrote, progress-bar debris included.
One module per concern; everything is importable from `workers.sglang`.
"""

from .acceptance_watch import ALARM_KINDS as ACCEPTANCE_ALARM_KINDS
from .acceptance_watch import AcceptanceAlarm, AcceptanceWatch
from .facts import (
    FAILURE_KINDS,
    MILESTONES,
    CaptureProgress,
    DecodeStats,
    Failure,
    FailureSignal,
    GraphCaptured,
    LogFact,
    Milestone,
    PrefillStats,
    Retraction,
    ServerArgsDump,
    ServerLimits,
    ShardProgress,
)
from .failures import find_failure, find_usage_error
from .launch import arg_mismatches, launch_argv, with_adaptive_schedule, with_metrics_enabled
from .live_facts import DECODE_SUMMARY_MARKERS, FactBatch, LogFacts, decode_summary, merge_series
from .loglines import parse_decode_line, parse_line, split_prefix
from .model_checks import (
    OVERRIDE_ENV,
    algorithm_problem,
    context_length_arg,
    context_length_problem,
    vocab_problem,
)

__all__ = [
    "ACCEPTANCE_ALARM_KINDS",
    "DECODE_SUMMARY_MARKERS",
    "FAILURE_KINDS",
    "MILESTONES",
    "OVERRIDE_ENV",
    "AcceptanceAlarm",
    "AcceptanceWatch",
    "CaptureProgress",
    "DecodeStats",
    "FactBatch",
    "Failure",
    "FailureSignal",
    "GraphCaptured",
    "LogFact",
    "LogFacts",
    "Milestone",
    "PrefillStats",
    "Retraction",
    "ServerArgsDump",
    "ServerLimits",
    "ShardProgress",
    "algorithm_problem",
    "arg_mismatches",
    "context_length_arg",
    "context_length_problem",
    "decode_summary",
    "find_failure",
    "find_usage_error",
    "launch_argv",
    "merge_series",
    "parse_decode_line",
    "parse_line",
    "split_prefix",
    "vocab_problem",
    "with_adaptive_schedule",
    "with_metrics_enabled",
]
