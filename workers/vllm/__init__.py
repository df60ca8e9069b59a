"""The vLLM engine: its `vllm serve` command, the facts carried by the lines its server logs, the failure a log
proves, and the adapter the run lifecycle drives it through (`adapter.VLLM`).

Pure: no Django and no I/O (but for the adapter's few calls to the server's HTTP API), so the orchestrator, the tests
and the simulator agree on one reading of the log. Formats follow ../shared/reference/vllm-interface.md (§2 startup,
§3 the stats and SpecDecoding lines, §4 failures, §8 eras) from 0.8.5 to 0.33. Nothing here raises on unexpected
text. The facts' types and what is done with them are every engine's (`workers.engines`); the model pair rules are
the domain's (`experiments.rules.model_checks.pair_problem("vllm", ...)`).
"""

from .engine_config import engine_config
from .failures import find_failure, find_usage_error
from .launch import arg_mismatches, launch_argv
from .loglines import clean_line, parse_line, parse_step_line, split_prefix
from .warnings import find_warning

__all__ = [
    "arg_mismatches",
    "clean_line",
    "engine_config",
    "find_failure",
    "find_usage_error",
    "find_warning",
    "launch_argv",
    "parse_line",
    "parse_step_line",
    "split_prefix",
]
