"""The vLLM version whose formats the vLLM personality imitates: `SIMHOST_VLLM_VERSION` (default 0.11.0).

Eras of ../shared/reference/vllm-interface.md §0/§8: A (0.8.5-0.9.2), B (0.10.x), C (0.10.2-0.17), D (0.18-0.30),
E (0.31-0.33). Every format that changed between versions is decided here, from the version tuple, so the rest of
simhost/vllm asks questions ("which SpecDecoding format?") instead of comparing versions itself. Where the reference
names only the first sampled version showing a change, the boundary is that version (§9: "boundaries are 'first
sampled version showing the change'").
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT = "0.11.0"
# The wheels the reference was read from (plus 0.19.1 / 0.30.0, whose changes it dates).
SUPPORTED = ("0.9.2", "0.10.1", "0.10.2", "0.11.0", "0.13.0", "0.17.1", "0.19.1", "0.23.0", "0.30.0", "0.33.0")
# The newest profile (what a demo host runs).
NEWEST = max(SUPPORTED, key=lambda text: tuple(int(part) for part in text.split(".")))

# The eagle3 target-model gate's list of model types per version (reference §1.2); None = no list (0.23+).
_EAGLE3_TARGETS_011 = ["llama", "qwen", "minicpm", "gpt_oss"]
_EAGLE3_TARGETS_017 = [*_EAGLE3_TARGETS_011, "hunyuan_vl", "hunyuan_v1_dense", "afmoe", "nemotron_h"]
_EAGLE3_TARGETS_019 = [
    *_EAGLE3_TARGETS_017,
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "kimi_k25",
    "minimax_m2",
    "gemma4",
]


class UnknownVersion(ValueError):
    pass


@dataclass(frozen=True)
class VllmVersion:
    text: str
    v: tuple[int, int, int]

    @classmethod
    def parse(cls, text: str) -> VllmVersion:
        match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:\.post\d+)?", text.strip())
        base = ".".join(match.groups()) if match else ""
        if base not in SUPPORTED:
            raise UnknownVersion(
                f"SIMHOST_VLLM_VERSION={text!r} is not a simulated vLLM version; supported: {', '.join(SUPPORTED)}"
            )
        a, b, c = (int(x) for x in base.split("."))
        return cls(base, (a, b, c))

    def at_least(self, text: str) -> bool:
        return self.v >= tuple(int(x) for x in text.split("."))

    @property
    def era(self) -> str:
        if not self.at_least("0.10.0"):
            return "A"
        if not self.at_least("0.10.2"):
            return "B"
        if not self.at_least("0.18.0"):
            return "C"
        return "D" if not self.at_least("0.31.0") else "E"

    # -- command line (§1)
    @property
    def model_option(self) -> str:
        """`--model` with `vllm serve`: 'error' (<= 0.11), 'warn_v013' (0.13-0.30), 'warn_future' (0.31+; the
        reference quotes 0.13 and 0.33, the boundary between them is a guess)."""
        if not self.at_least("0.13.0"):
            return "error"
        return "warn_v013" if not self.at_least("0.31.0") else "warn_future"

    @property
    def spec_shorthands(self) -> bool:
        """`--spec-method/--spec-model/--spec-tokens` and `-sc` (0.23+)."""
        return self.at_least("0.23.0")

    @property
    def per_request_spec_metrics(self) -> bool:
        return self.at_least("0.30.0")

    @property
    def disable_log_requests(self) -> str:
        """'plain' (<= 0.9.2), 'deprecated' (0.10-0.16), 'gone' (0.17+: unrecognized)."""
        if not self.at_least("0.10.0"):
            return "plain"
        return "deprecated" if not self.at_least("0.17.0") else "gone"

    @property
    def compile_alias(self) -> str:
        """What `-O` means: '' (none, <= 0.9.2), 'compilation-config' (0.10-0.11), 'optimization-level' (0.13+)."""
        if not self.at_least("0.10.0"):
            return ""
        return "compilation-config" if not self.at_least("0.13.0") else "optimization-level"

    @property
    def eagle3_targets(self) -> list[str] | None:
        """The model types the eagle3 gate accepts (substring match), or None where there is no list (0.23+)."""
        if self.at_least("0.23.0"):
            return None
        if self.at_least("0.19.0"):
            return _EAGLE3_TARGETS_019
        if self.at_least("0.17.0"):
            return _EAGLE3_TARGETS_017
        if self.at_least("0.11.0"):
            return _EAGLE3_TARGETS_011
        if self.at_least("0.10.0"):
            return ["llama", "qwen"]
        return ["llama"]

    def eagle3_gate_message(self, model_type: str) -> str:
        got = f"Got self.target_model_config.hf_text_config.model_type={model_type!r}"
        if not self.at_least("0.10.0"):
            return f"Eagle3 is only supported for Llama models. {got}"
        if not self.at_least("0.17.0"):
            return f"Eagle3 is only supported for {self.eagle3_targets} models. {got}"
        return f"eagle3 is only supported for {self.eagle3_targets} models. {got}"

    @property
    def spec_tokens_gt_zero_pydantic(self) -> bool:
        """0.33: `num_speculative_tokens` is a pydantic `gt=0` field (else a ValueError in __post_init__)."""
        return self.at_least("0.33.0")

    @property
    def tp_too_large(self) -> str:
        """'ray' (the 0.11 text, also assumed before), 'world' (the 0.33 text; from 0.31 on is a guess)."""
        return "ray" if not self.at_least("0.31.0") else "world"

    # -- log prefixes (§2.3, §5)
    @property
    def prefix_style(self) -> str:
        """'workers' (era A: only TP workers, via a stdout wrapper), 'wrapper' (0.10-0.30: every line of every
        process), 'formatter' (0.31+: vLLM's own log lines only)."""
        if not self.at_least("0.10.0"):
            return "workers"
        return "wrapper" if not self.at_least("0.31.0") else "formatter"

    @property
    def engine_core_name(self) -> str:
        if not self.at_least("0.11.0"):
            return "EngineCore_0"
        return "EngineCore_DP0" if not self.at_least("0.18.0") else "EngineCore"

    def worker_name(self, rank: int) -> str:
        if not self.at_least("0.10.0"):
            return f"VllmWorker rank={rank}"
        if not self.at_least("0.11.0"):
            return f"VllmWorker TP{rank}"
        return f"Worker_TP{rank}"

    def colour(self, env: Mapping[str, str], isatty: bool) -> bool:
        """Whether the process prefix is ANSI-cyan: always (<= 0.11 and era A workers), unless NO_COLOR (0.13),
        only on a TTY or with VLLM_LOGGING_COLOR=1 (0.17+)."""
        if not self.at_least("0.13.0"):
            return True
        if not self.at_least("0.17.0"):
            return "NO_COLOR" not in env
        if "NO_COLOR" in env or env.get("VLLM_LOGGING_COLOR") == "0":
            return False
        return env.get("VLLM_LOGGING_COLOR") == "1" or isatty

    @property
    def titles(self) -> bool:
        """0.10+: `VLLM::EngineCore`, `VLLM::Worker_TP{r}` process titles (0.8.5/0.9.2 set none)."""
        return self.at_least("0.10.0")

    @property
    def per_rank_lines_everywhere(self) -> bool:
        """Per-rank lines come from every rank (<= 0.11) or from rank 0 only (0.13+)."""
        return not self.at_least("0.13.0")

    # -- startup lines (§2.4)
    @property
    def server_version_line(self) -> bool:
        """0.15+: `vLLM server version %s, serving model %s` (the logo variant is not imitated)."""
        return self.at_least("0.15.0")

    @property
    def serving_line(self) -> str:
        if not self.at_least("0.18.0"):
            return "Starting vLLM API server {i} on {url}"
        return "Starting vLLM server on {url}"

    @property
    def supported_tasks_line(self) -> str | None:
        if not self.at_least("0.10.0"):
            return None
        return "Supported_tasks: %s" if not self.at_least("0.13.0") else "Supported tasks: %s"

    def model_loading_line(self, gib: float, seconds: float) -> str:
        if not self.at_least("0.13.0"):
            return f"Model loading took {gib:.4f} GiB and {seconds:.6f} seconds"
        if not self.at_least("0.17.0"):
            return f"Model loading took {gib:.4f} GiB memory and {seconds:.6f} seconds"
        return f"Model loading took {round(gib, 2)} GiB memory and {seconds:.6f} seconds"

    def available_kv_line(self, gib: float) -> str:
        if not self.at_least("0.17.0"):
            return f"Available KV cache memory: {gib:.2f} GiB"
        return f"Available KV cache memory: {round(gib, 2)} GiB"

    @property
    def combined_kv_line(self) -> bool:
        """0.31+ (sampled 0.33): one `GPU KV cache size: ..., Maximum concurrency ...` line."""
        return self.at_least("0.31.0")

    @property
    def graph_capture_desc(self) -> str:
        """tqdm description: 0.9.2 `Capturing CUDA graph shapes`; 0.11 `Capturing CUDA graphs ({mode}, {kind})`
        (0.10.x is not sampled: the older one is assumed)."""
        return "shapes" if not self.at_least("0.11.0") else "modes"

    @property
    def compile_took_line(self) -> str:
        return (
            "torch.compile takes %.2f s in total"
            if not self.at_least("0.31.0")
            else "torch.compile took %.2f s in total"
        )

    @property
    def init_engine_style(self) -> str:
        """'seconds' (`took %.2f seconds`, <= 0.20) or 's' (`took %.2f s (compilation: %.2f s)`, 0.23+)."""
        return "seconds" if not self.at_least("0.23.0") else "s"

    @property
    def graph_memory_profiling(self) -> bool:
        """0.21+ (sampled 0.23): CUDA graph memory counted inside --gpu-memory-utilization."""
        return self.at_least("0.23.0")

    # -- statistics (§3)
    @property
    def spec_format(self) -> str:
        return "A" if not self.at_least("0.10.2") else "B"

    @property
    def kv_usage_label(self) -> str:
        """0.33: `%s KV cache usage` with `GPU`; the same text either way."""
        return "GPU KV cache usage"

    # -- HTTP (§2.2, §6)
    @property
    def health_dead_status(self) -> int:
        return 500 if not self.at_least("0.11.0") else 503

    @property
    def nested_errors(self) -> bool:
        return self.at_least("0.10.0")

    @property
    def return_token_ids(self) -> bool:
        """0.11+: `prompt_token_ids` / `token_ids` in completion choices."""
        return self.at_least("0.11.0")

    # -- failures (§4)
    @property
    def free_memory_names_device(self) -> bool:
        return self.at_least("0.17.0")

    @property
    def no_cache_blocks_hint(self) -> bool:
        """0.33 appends the CPU-backend remark and the docs link (0.31 boundary is a guess)."""
        return self.at_least("0.31.0")

    @property
    def models_typo(self) -> bool:
        """`the models's max seq len` (0.11 text) until fixed to `model's` (seen in 0.33; 0.31 boundary a guess)."""
        return not self.at_least("0.31.0")

    @property
    def shutdown_lines(self) -> list[str]:
        if not self.at_least("0.23.0"):
            return ["Shutting down FastAPI HTTP server."]
        return ["[shutdown] API server: shutdown triggered", "[shutdown] API server: shutting down FastAPI HTTP server"]

    @property
    def reuse_port(self) -> bool:
        """SO_REUSEPORT on the API socket: unconditional <= 0.23, only with --api-server-count > 1 from 0.26."""
        return not self.at_least("0.26.0")


def current(env: Mapping[str, str] | None = None) -> VllmVersion:
    env = os.environ if env is None else env
    return VllmVersion.parse(env.get("SIMHOST_VLLM_VERSION") or DEFAULT)
