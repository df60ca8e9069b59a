"""vLLM as the run lifecycle sees it (`workers.engines.Engine`): this package's pure reading, and the few calls to the
server's HTTP API that a vLLM server answers (`/v1/completions`, `/reset_prefix_cache`).

Choices where vLLM differs from SGLang (../shared/reference/vllm-interface.md):
- No warming phase: the port refuses connections until `Application startup complete.` and `/health` is 200 from
  the first accepted one (§2.1), so `warming_status` is None.
- No `/server_info` unless VLLM_SERVER_DEV_MODE=1 (§2.2): the effective arguments are the engine config line the log
  prints at start (`Initializing a V1 LLM engine ... with config:`), read into the server log's args dump.
- The server's accept length per cell: vLLM's `vllm:spec_decode_*` counters are cumulative and reset by nothing
  (§3.2), so the figure is the difference of two scrapes around the cell's requests, which the benchmark client takes
  itself (its vLLM backend, like `vllm bench serve`, §7.4). `server_accept_length` is therefore None: a delta kept
  here would live only in this worker's memory and be lost to a re-attach.
- Between cells `/reset_prefix_cache` is posted so that a cell does not hit the prefix cache its predecessor warmed.
  vLLM serves it only with VLLM_SERVER_DEV_MODE=1 in the server's environment (what `vllm bench sweep` sets, §7.5);
  without it the answer is 404 and the cells share the cache. The accept length does not depend on the reset (see
  above), so nothing else is lost.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from experiments.rules import model_checks

from ..engines import LogGrammar, ServerHttp
from ..engines.facts import DecodeStats, Failure, LogFact, ServerWarning
from . import failures, launch, loglines, warnings


class VllmGrammar:
    """vLLM's log, every era (reference §2.3, §3.1): the `SpecDecoding metrics:` lines (formats A and B) are the steps
    the live acceptance reads; the stats line before each (`Engine 000: Avg prompt throughput: ...`) is the marker of
    an interval that ended with nothing running, whose throughput says little (as SGLang's idle Prefill batch)."""

    step_marker = loglines.SPEC_MARKER
    prefill_marker: str | None = loglines.STATS_MARKER

    def parse_line(self, line: str) -> LogFact | None:
        return loglines.parse_line(line)

    def parse_step_line(self, line: str) -> tuple[str | None, DecodeStats] | None:
        return loglines.parse_step_line(line)

    def prefill_was_idle(self, line: str) -> bool:
        stats = loglines.stats_running(line)
        return stats is not None and stats[0] == 0

    def find_warning(self, line: str) -> ServerWarning | None:
        return warnings.find_warning(line)

    def graph_limit_warning(
        self, graph_max_bs: int, max_running: int | None, max_concurrency: int | None
    ) -> ServerWarning | None:
        return warnings.graph_limit_warning(graph_max_bs, max_running, max_concurrency)

    def clean_line(self, line: str) -> str:
        return loglines.clean_line(line)


# A prompt any model completes in a few tokens; temperature 0 so that a re-run sends the very same request.
SMOKE_PROMPT = "The capital city of France is"


class VllmEngine:
    name = "vllm"
    label = "vLLM"
    grammar: LogGrammar = VllmGrammar()
    step_lines = "SpecDecoding lines"
    bench_backend = "vllm"
    warming_status: int | None = None
    supports_profiling = False
    supports_adaptive = False
    flags_listed = False

    def launcher(self, host: Any) -> str:
        return str(host.launcher_for(self.name))

    def launch_argv(self, spec: Mapping[str, Any], *, host: str, port: int, adaptive_config: str | None) -> list[str]:
        # adaptive_config: vLLM has no adaptive schedule to install (supports_adaptive is False).
        return launch.launch_argv(spec, host=host, port=port)

    def find_failure(self, texts: Sequence[str]) -> Failure | None:
        return failures.find_failure(texts)

    def find_usage_error(self, texts: Sequence[str]) -> Failure | None:
        return failures.find_usage_error(texts)

    def algorithm_problem(self, algorithm: str, draft: Mapping[str, Any] | None) -> str | None:
        """An EAGLE3 draft served with method `eagle` (EAGLE-1): vLLM reads the weights as the wrong head (0.8.5 did
        so itself for `eagle3-` paths without a method, §1.2). What it then does is unverified: said before launch."""
        if (algorithm or "") != "eagle" or not model_checks.is_eagle3_draft(draft):
            return None
        return (
            f"The draft model's config.json says {model_checks.architecture_of(draft)}, an EAGLE3 draft, and this "
            "config runs the speculative method eagle (EAGLE-1): vLLM loads it as the wrong kind of head. Use the "
            "method eagle3."
        )

    def model_problem(
        self, target: Mapping[str, Any], draft: Mapping[str, Any], *, spec: Mapping[str, Any], env: Mapping[str, str]
    ) -> str | None:
        return model_checks.pair_problem("vllm", target, draft, spec=spec, env=env)

    def arg_mismatches(self, requested: Mapping[str, Any], effective: Mapping[str, Any]) -> list[str]:
        return launch.arg_mismatches(requested, effective)

    async def effective_args(self, api: ServerHttp, logged: Mapping[str, Any]) -> dict[str, Any]:
        # /server_info exists only in development mode (§2.2); the engine config line is always logged.
        return dict(logged)

    def smoke_request(self, model: str) -> tuple[str, dict[str, Any]]:
        return "/v1/completions", {"model": model, "prompt": SMOKE_PROMPT, "max_tokens": 8, "temperature": 0}

    def smoke_tokens(self, reply: str) -> int:
        with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
            return int(json.loads(reply)["usage"]["completion_tokens"])
        return 0

    async def reset_between_cells(self, api: ServerHttp) -> int | None:
        # 404 without VLLM_SERVER_DEV_MODE=1: the cells then share the prefix cache (see the module's docstring).
        return await api.post("/reset_prefix_cache")

    async def server_accept_length(self, api: ServerHttp) -> float | None:
        """None: the benchmark client reads the cell's accept length from the counters' delta (module docstring)."""
        return None


VLLM = VllmEngine()
