"""vLLM's log line shapes per version (pure): the process prefix, the logger format, the periodic stats line, the
`SpecDecoding metrics:` line in format A or B, the KV cache lines and the engine config line (reference §2.3, §2.4,
§3.1). simhost/vllm/logs.py writes them."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from simhost.vllm.versions import VllmVersion

CYAN, RESET = "\x1b[1;36m", "\x1b[0;0m"


def process_prefix(name: str, pid: int, colour: bool) -> str:
    """`(APIServer pid=N) `, ANSI-cyan where the version colours it."""
    text = f"({name} pid={pid})"
    return f"{CYAN}{text}{RESET} " if colour else f"{text} "


def log_head(level: str, where: str, now: float | None = None) -> str:
    """`INFO 10-26 12:36:26 [loggers.py:127] `: vLLM's `%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] `
    with the date format `%m-%d %H:%M:%S` (no year)."""
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() if now is None else now))
    return f"{level} {stamp} [{where}] "


def format_record(prefix: str, head: str, message: str) -> str:
    """One logged record: vLLM's NewLineFormatter turns every `\\n` of the message into `\\r\\n` + the full
    prefix, so each physical line of a traceback carries it."""
    full = prefix + head
    return full + message.replace("\n", "\r\n" + full) + "\n"


def prefix_lines(prefix: str, text: str) -> str:
    """What the stdout/stderr wrapper of 0.10-0.30 does to printed text (uvicorn, tqdm, tracebacks): the prefix at
    the start of every line."""
    if not prefix:
        return text
    # only "\n" starts a line: a tqdm bar's "\r" updates stay on the prefixed line
    *whole, last = text.split("\n")
    return "".join(f"{prefix}{piece}\n" for piece in whole) + (prefix + last if last else "")


def stats_line(
    ver: VllmVersion,
    prompt_tps: float,
    gen_tps: float,
    running: int,
    waiting: int,
    kv_usage: float,
    prefix_hit: float,
    prefix_queries: bool = True,
) -> str:
    """`Engine 000: Avg prompt throughput: ...` (usage and hit rate as fractions). 0.33 prints the hit rate only
    when prefix caching saw queries."""
    parts = [
        f"Avg prompt throughput: {prompt_tps:.1f} tokens/s",
        f"Avg generation throughput: {gen_tps:.1f} tokens/s",
        f"Running: {running} reqs",
        f"Waiting: {waiting} reqs",
        f"{ver.kv_usage_label}: {kv_usage * 100:.1f}%",
    ]
    if prefix_queries or not ver.at_least("0.31.0"):
        parts.append(f"Prefix cache hit rate: {prefix_hit * 100:.1f}%")
    return "Engine 000: " + ", ".join(parts)


def _pct(numerator: float, denominator: float) -> str:
    return "nan" if denominator == 0 else f"{numerator / denominator * 100:.1f}"


def spec_line(
    ver: VllmVersion,
    num_drafts: int,
    drafted: int,
    accepted: int,
    per_position: Sequence[int],
    elapsed_s: float,
) -> str:
    """`SpecDecoding metrics: ...` in format A (<= 0.10.1) or B (0.10.2+), over the observations since the last
    printed line; throughputs (B) over the time since then."""
    mean_len = 1 + accepted / num_drafts if num_drafts else math.nan
    rates = ", ".join(f"{count / num_drafts:.3f}" if num_drafts else "nan" for count in per_position)
    if ver.spec_format == "A":
        return (
            f"SpecDecoding metrics: Draft acceptance rate: {_pct(accepted, drafted)}%, Mean acceptance length: "
            f"{mean_len:.2f}, Accepted: {accepted} tokens, Drafted: {drafted} tokens, Per-position acceptance "
            f"rate: {rates}"
        )
    elapsed = max(elapsed_s, 1e-9)
    return (
        f"SpecDecoding metrics: Mean acceptance length: {mean_len:.2f}, Accepted throughput: "
        f"{accepted / elapsed:.2f} tokens/s, Drafted throughput: {drafted / elapsed:.2f} tokens/s, Accepted: "
        f"{accepted} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: {rates}, Avg Draft acceptance "
        f"rate: {_pct(accepted, drafted)}%"
    )


def kv_cache_lines(ver: VllmVersion, tokens: int, max_model_len: int) -> list[str]:
    """`GPU KV cache size: N tokens` and `Maximum concurrency for M tokens per request: X.XXx` (one combined line
    in 0.31+)."""
    size = f"GPU KV cache size: {tokens:,} tokens"
    concurrency = f"Maximum concurrency for {max_model_len:,} tokens per request: {tokens / max_model_len:.2f}x"
    if ver.combined_kv_line:
        return [f"{size}, {concurrency}"]
    return [size, concurrency]


def speculative_config_repr(method: str | None, draft: str | None, num_spec_tokens: int) -> str:
    if method is None:
        return "None"
    return f"SpeculativeConfig(method={method!r}, model={draft!r}, num_spec_tokens={num_spec_tokens})"


def engine_config_line(
    ver: VllmVersion,
    *,
    model: str,
    served_model_name: str,
    max_seq_len: int,
    tp: int,
    enforce_eager: bool,
    speculative: str,
    seed: int | None,
) -> str:
    """`Initializing a V1 LLM engine (v0.11.0) with config: model=..., speculative_config=..., ...`: the fields
    the reference names (§1.2) in vLLM's order as far as it is known; the rest of the real line is left out."""
    fields = [
        f"model={model!r}",
        f"speculative_config={speculative}",
        f"tokenizer={model!r}",
        "skip_tokenizer_init=False",
        "tokenizer_mode=auto",
        "revision=None",
        "trust_remote_code=False",
        "dtype=torch.bfloat16",
        f"max_seq_len={max_seq_len}",
        "download_dir=None",
        "load_format=auto",
        f"tensor_parallel_size={tp}",
        "pipeline_parallel_size=1",
        "data_parallel_size=1",
        "disable_custom_all_reduce=False",
        "quantization=compressed-tensors",
        f"enforce_eager={enforce_eager}",
        "kv_cache_dtype=auto",
        "device_config=cuda",
        f"seed={seed if seed is not None else 0}",
        f"served_model_name={served_model_name}",
        "enable_prefix_caching=True",
        "chunked_prefill_enabled=True",
        "pooler_config=None",
        "compilation_config={"
        + ("'level': 0" if enforce_eager else "'level': 3")
        + ", 'cudagraph_mode': "
        + ("<CUDAGraphMode.NONE: 0>" if enforce_eager else "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>")
        + "}",
    ]
    return f"Initializing a V1 LLM engine (v{ver.text}) with config: " + ", ".join(fields)


def tqdm_shards(n_done: int, total: int, elapsed: float) -> str:
    """`Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.62it/s]` (one line per
    update: vLLM's bar format ends in a newline)."""
    if n_done == 0:
        return f"Loading safetensors checkpoint shards:   0% Completed | 0/{total} [00:00<?, ?it/s]\n"
    rate = n_done / elapsed if elapsed > 0 else 99.99
    left = (total - n_done) / rate if rate else 0.0
    return (
        f"Loading safetensors checkpoint shards: {100 * n_done // total:3d}% Completed | {n_done}/{total} "
        f"[{mmss(elapsed)}<{mmss(left)}, {rate:6.2f}it/s]\n"
    )


def tqdm_capture(desc: str, total: int, elapsed: float) -> str:
    """A graph-capture tqdm bar: its first and last states, `\\r`-separated, in one line ending in `\\n`."""
    rate = total / max(elapsed, 1e-3)
    return (
        f"{desc}:   0%|          | 0/{total} [00:00<?, ?it/s]"
        f"\r{desc}: 100%|██████████| {total}/{total} [{mmss(elapsed)}<00:00, {rate:5.2f}it/s]\n"
    )


def mmss(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60:02d}:{whole % 60:02d}"


# Parsers' regexes from the reference (§3.1), used by the tests and by anyone reading these logs.
PREFIX_RE = (
    r"^(?:\((?P<proc>.+?) pid=(?P<pid>\d+)\) )?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d) \[(?P<src>[^\]]+):(?P<lineno>\d+)\] (?P<msg>.*)$"
)
SPEC_B_RE = (
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[\d.]+|nan), Accepted throughput: (?P<acc_tps>[\d.]+) "
    r"tokens/s, Drafted throughput: (?P<draft_tps>[\d.]+) tokens/s, Accepted: (?P<acc>\d+) tokens, Drafted: "
    r"(?P<drafted>\d+) tokens, Per-position acceptance rate: (?P<pos>[\d., na]*), Avg Draft acceptance rate: "
    r"(?P<rate>[\d.]+|nan)%"
)
SPEC_A_RE = (
    r"SpecDecoding metrics: Draft acceptance rate: (?P<rate>[\d.]+|nan)%, Mean acceptance length: (?P<mal>[\d.]+), "
    r"Accepted: (?P<acc>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, Per-position acceptance rate: "
    r"(?P<pos>[\d., na]*)$"
)
STATS_RE = (
    r"(?:Engine (?P<eng>\d{3})|(?P<n>\d+) Engines Aggregated): Avg prompt throughput: (?P<p>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<g>[\d.]+) tokens/s, Running: (?P<run>\d+) reqs, Waiting: (?P<wait>\d+) reqs"
)
