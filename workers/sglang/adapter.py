"""SGLang as the run lifecycle sees it (`workers.engines.Engine`): this package's pure reading, and the few calls to
the server's HTTP API that only SGLang answers (`/server_info`, `/flush_cache`, `/generate`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from experiments.rules import model_checks

from ..engines import LogGrammar, ServerHttp
from ..engines.facts import DecodeStats, Failure, LogFact, PrefillStats, ServerWarning
from . import failures, launch, loglines, warnings


class SglangGrammar:
    """SGLang's log, every era (reference §3): `Decode batch` lines are the steps, `Prefill batch` the prefills."""

    step_marker = "Decode batch"  # all eras: "Decode batch." / "Decode batch," / "Decode batch [N],"
    prefill_marker: str | None = "Prefill batch"

    def parse_line(self, line: str) -> LogFact | None:
        return loglines.parse_line(line)

    def parse_step_line(self, line: str) -> tuple[str | None, DecodeStats] | None:
        return loglines.parse_decode_line(line)

    def prefill_was_idle(self, line: str) -> bool:
        prefill = loglines.parse_line(line)
        return isinstance(prefill, PrefillStats) and prefill.running_req == 0

    def find_warning(self, line: str) -> ServerWarning | None:
        return warnings.find_warning(line)

    def graph_limit_warning(
        self, graph_max_bs: int, max_running: int | None, max_concurrency: int | None
    ) -> ServerWarning | None:
        return warnings.graph_limit_warning(graph_max_bs, max_running, max_concurrency)

    def clean_line(self, line: str) -> str:
        return loglines.clean_line(line)


# A prompt any model completes in a few tokens; temperature 0 so that a re-run sends the very same request.
SMOKE_BODY = {"text": "The capital city of France is", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}


class SglangEngine:
    name = "sglang"
    label = "SGLang"
    grammar: LogGrammar = SglangGrammar()
    step_lines = "Decode lines"
    bench_backend = "sglang"
    warming_status: int | None = 503
    supports_profiling = True
    supports_adaptive = True
    flags_listed = True

    def launcher(self, host: Any) -> str:
        return str(host.launcher_for(self.name))

    def launch_argv(self, spec: Mapping[str, Any], *, host: str, port: int, adaptive_config: str | None) -> list[str]:
        argv = launch.launch_argv(spec, host=host, port=port)
        return launch.with_adaptive_schedule(launch.with_metrics_enabled(argv), adaptive_config)

    def find_failure(self, texts: Sequence[str]) -> Failure | None:
        return failures.find_failure(texts)

    def find_usage_error(self, texts: Sequence[str]) -> Failure | None:
        return failures.find_usage_error(texts)

    def algorithm_problem(self, algorithm: str, draft: Mapping[str, Any] | None) -> str | None:
        return model_checks.algorithm_problem(algorithm, draft)

    def model_problem(
        self, target: Mapping[str, Any], draft: Mapping[str, Any], *, spec: Mapping[str, Any], env: Mapping[str, str]
    ) -> str | None:
        return model_checks.pair_problem("sglang", target, draft, spec=spec, env=env)

    def arg_mismatches(self, requested: Mapping[str, Any], effective: Mapping[str, Any]) -> list[str]:
        return launch.arg_mismatches(dict(requested), dict(effective))

    async def effective_args(self, api: ServerHttp, logged: Mapping[str, Any]) -> dict[str, Any]:
        # `/server_info`, or `/get_server_info` on a server older than the rename (0.5.6). The new name first: the
        # old one logs a deprecation warning, which the run would then report as the server's.
        info = await api.get_json("/server_info") or await api.get_json("/get_server_info")
        return {k: v for k, v in (info or logged).items() if k != "internal_states"}

    def smoke_request(self, model: str) -> tuple[str, dict[str, Any]]:
        return "/generate", SMOKE_BODY

    def smoke_tokens(self, reply: str) -> int:
        with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
            return int(json.loads(reply)["meta_info"]["completion_tokens"])
        return 0

    async def reset_between_cells(self, api: ServerHttp) -> int | None:
        # /flush_cache also resets the accept-length counters (0.5.9), so what /server_info reports after a cell is
        # that cell's alone. Refused (400, "Cache not flushed because there are pending requests") until the last
        # cell's requests have left the scheduler: the caller waits that out.
        return await api.post("/flush_cache")

    async def server_accept_length(self, api: ServerHttp) -> float | None:
        """The first scheduler's average accept length (`/server_info` internal state); None for a baseline or an
        older server."""
        info = await api.get_json("/server_info") or await api.get_json("/get_server_info")
        states = (info or {}).get("internal_states")
        first = states[0] if isinstance(states, list) and states else None
        accept = first.get("avg_spec_accept_length") if isinstance(first, dict) else None
        return accept if isinstance(accept, int | float) else None


SGLANG = SglangEngine()
