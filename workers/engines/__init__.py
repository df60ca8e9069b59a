"""The engine seam: what the run lifecycle asks of an inference engine, and the engines specdash drives.

`workers/run/` names no engine. It asks `of(config)` for the config's engine and talks to it through `Engine`: the
launch argv, the log grammar, the failures a log proves, the model pairs the engine refuses, how its effective
arguments are read back, its smoke request, the benchmark client's backend for it. Each engine is one package of
pure reading (`workers/sglang/`, `workers/vllm/`) plus a small adapter object registered here; what every engine's
log yields (`facts`), how its lines become live facts (`live_facts`) and the live acceptance alarm
(`acceptance_watch`) are shared, so an engine only says what its lines mean.

A test (workers/tests/test_engines.py) lists what an engine must provide and holds every registered one to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from experiments.rules.launch_fields import ENGINE_NAMES

from .acceptance_watch import ALARM_KINDS as ACCEPTANCE_ALARM_KINDS
from .acceptance_watch import AcceptanceWatch
from .facts import Failure, FailureSignal
from .live_facts import FactBatch, LogFacts, LogGrammar, decode_summary, merge_series, summary_markers

__all__ = [
    "ACCEPTANCE_ALARM_KINDS",
    "ENGINE_NAMES",
    "AcceptanceWatch",
    "Engine",
    "FactBatch",
    "Failure",
    "FailureSignal",
    "LogFacts",
    "LogGrammar",
    "ServerHttp",
    "decode_summary",
    "merge_series",
    "named",
    "of",
    "summary_markers",
]


class ServerHttp(Protocol):
    """The server's HTTP API as an engine adapter uses it (workers/run/server.py's ServerApi)."""

    async def get_json(self, path: str) -> dict[str, Any] | None: ...

    async def get_text(self, path: str) -> str | None: ...

    async def post(self, path: str) -> int | None: ...


class Engine(Protocol):
    """What the run lifecycle needs of an engine. Pure, but for the few calls that take the server's `ServerHttp`."""

    name: str  # ServerConfig.engine
    label: str  # as people write it: "SGLang", "vLLM"
    grammar: LogGrammar
    step_lines: str  # what its periodic step lines are called in messages ("Decode lines")
    bench_backend: str  # workers/benchclient's backend for this engine's server
    # The /health status while the server warms up after its port opened (SGLang: 503), None when it has no such
    # phase (vLLM accepts connections only once ready).
    warming_status: int | None
    supports_profiling: bool  # specdash's per-phase profiling (workers/run/profiling.py) knows its endpoints
    supports_adaptive: bool  # an adaptive schedule can be installed (workers/run/adaptive.py)
    # The host's listing holds this engine's flags (`Host.server_flags`, read from its `--help`), so a new version
    # seen by a run's fingerprint (package `name`) asks for a new listing.
    flags_listed: bool

    def launcher(self, host: Any) -> str:
        """The host's command that starts this engine's server (the words before the argv), "" if it has none."""

    def launch_argv(self, spec: Mapping[str, Any], *, host: str, port: int, adaptive_config: str | None) -> list[str]:
        """The server's arguments for a config's launch spec: every launch field, metrics on, the address."""

    def find_failure(self, texts: Sequence[str]) -> Failure | None: ...

    def find_usage_error(self, texts: Sequence[str]) -> Failure | None: ...

    def algorithm_problem(self, algorithm: str, draft: Mapping[str, Any] | None) -> str | None:
        """A draft served with a method that accepts nothing (EAGLE3 weights as EAGLE, say), or None."""

    def model_problem(
        self,
        target: Mapping[str, Any],
        draft: Mapping[str, Any],
        *,
        spec: Mapping[str, Any],
        env: Mapping[str, str],
    ) -> str | None:
        """Why this engine would refuse the target and draft pair (context, vocab), in its words, or None."""

    def arg_mismatches(self, requested: Mapping[str, Any], effective: Mapping[str, Any]) -> list[str]:
        """The launch fields the server runs otherwise than asked."""

    async def effective_args(self, api: ServerHttp, logged: Mapping[str, Any]) -> dict[str, Any]:
        """What the server says it runs: from its API where it has one, else `logged` (its log's config dump)."""

    def smoke_request(self, model: str) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) of the first generation, a few greedy tokens."""

    def smoke_tokens(self, reply: str) -> int:
        """The tokens the smoke request's reply says it generated (0 when it cannot tell)."""

    async def reset_between_cells(self, api: ServerHttp) -> int | None:
        """Reset what carries over from one benchmark cell to the next (caches, and the counters the server's accept
        length is read from where that resets them): the HTTP status of the reset, None when nothing answered. 400
        means requests are still pending: the caller tries again."""

    async def server_accept_length(self, api: ServerHttp) -> float | None:
        """The accept length the server measured since the last reset, or None where it has no such figure."""


def _registry() -> dict[str, Engine]:
    # Imported here, not at the top: the engine packages import this package's shared modules.
    from workers.sglang.adapter import SGLANG
    from workers.vllm.adapter import VLLM

    engines: list[Engine] = [SGLANG, VLLM]
    return {engine.name: engine for engine in engines}


_ENGINES: dict[str, Engine] = {}


def named(name: str) -> Engine:
    """The engine called `name` (a ServerConfig.engine value); KeyError for one specdash does not drive."""
    if not _ENGINES:
        _ENGINES.update(_registry())
    return _ENGINES[name or "sglang"]


def of(config: Any) -> Engine:
    """The engine a server config runs on."""
    return named(getattr(config, "engine", "") or "sglang")
