"""Every SIMHOST_* environment knob in one place: name, default, meaning (used by --help and the README)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

KNOBS: list[tuple[str, str, str]] = [
    (
        "SIMHOST_SGLANG_VERSION",
        "0.5.9",
        "SGLang version whose log/HTTP/CLI formats are imitated: era A 0.5.3; era B 0.5.4-0.5.12; era C 0.5.14-0.5.23 "
        "(unknown version: error, exit 2)",
    ),
    ("SIMHOST_LOAD_SECONDS", "8", "wall time of the whole loading + CUDA-graph capture phase (tests: 0.3)"),
    ("SIMHOST_SPEED", "1", "speed factor of the simulated GPU: sleeps are divided by it; 0 = no sleeps"),
    (
        "SIMHOST_FAST_BURST_STEPS",
        "8",
        "with SIMHOST_SPEED=0: engine steps between yields to the HTTP side; each stream then gets its "
        "per-step events in one send (1 = one send per step)",
    ),
    ("SIMHOST_NOISE", "0.01", "relative std-dev of each step's duration"),
    ("SIMHOST_LAUNCH_NOISE", "0.005", "relative std-dev of a per-launch speed factor"),
    ("SIMHOST_SLOWDOWN", "1.0", "multiplies every step duration (inject a regression, e.g. 1.1)"),
    ("SIMHOST_DRIFT", "0", "relative slowdown per hour of server uptime (slow drift of the machine)"),
    (
        "SIMHOST_THROTTLE_AFTER_S",
        "",
        "thermal throttling: after this many seconds of serving, steps slow down and nvidia-smi reports lower "
        "clocks with the thermal clock event reasons",
    ),
    ("SIMHOST_THROTTLE_FACTOR", "1.5", "thermal throttling: step duration multiplier once throttled"),
    (
        "SIMHOST_SEED",
        "",
        "seed of the noise draws (default: --random-seed, else random) and, mixed with each prompt, of its acceptance "
        "draws (default: --random-seed, else 0, so a prompt accepts the same drafts on every launch, as at "
        "temperature 0)",
    ),
    ("SIMHOST_ACCEPT_P", "0.62", "per-token draft acceptance probability (EAGLE/EAGLE3/STANDALONE)"),
    ("SIMHOST_ACCEPT_SPREAD", "0.03", "std-dev of the per-request acceptance probability around the mean"),
    ("SIMHOST_NGRAM_ACCEPT_P", "0.3", "per-token acceptance probability for NGRAM"),
    ("SIMHOST_GPUS", "8", "number of simulated GPUs"),
    ("SIMHOST_GPU_MEMORY_MIB", "143771", "memory per GPU in MiB (143771 = H200)"),
    ("SIMHOST_GPU_NAME", "NVIDIA H200", "GPU product name reported by nvidia-smi"),
    (
        "SIMHOST_STATE_DIR",
        "/tmp/simhost-<uid>",
        "GPU memory registry (gpu/<pid>.json), shared with nvidia-smi",
    ),
    ("SIMHOST_FAULTS", "", "comma-separated faults (also read from ./simhost-faults): " + "FAULTS_HELP"),
    ("SIMHOST_FAULT_RANK", "0", "TP rank hit by ignore_sigterm and leak"),
    ("SIMHOST_DRAFT_BUG_AFTER", "8", "draft_bug: output tokens from this position on differ from the baseline's"),
    (
        "SIMHOST_NONDETERMINISM",
        "0",
        "share of prompts whose output a speculative server changes late (token 40..127): float non-determinism",
    ),
    ("SIMHOST_LOOP_SHARE", "0.5", "output_loop(_speculative): share of prompts whose output loops (by prompt hash)"),
    ("SIMHOST_LOOP_AFTER_TOKENS", "40", "output_loop(_speculative): output tokens before the loop starts"),
    ("SIMHOST_LOOP_PERIOD", "4", "output_loop(_speculative): the last this many tokens repeat until max tokens"),
    (
        "SIMHOST_TEMPLATE_EXTRA_TOKENS",
        "11",
        "template_mismatch: extra prompt tokens a speculative server's own template adds per request",
    ),
    ("SIMHOST_FLAKY_SECONDS", "5", "health_flaky: seconds of 503 answers after ready"),
    ("SIMHOST_FLOOD_LINES_PER_S", "200", "log_flood: extra log lines per second once ready (>= 100000 works)"),
    ("SIMHOST_CRASH_AFTER_REQUESTS", "5", "crash_mid_benchmark: requests served before the next one crashes"),
    ("SIMHOST_ENV_DROP", "NCCL_*", "env_drop: comma-separated names/globs removed from scheduler envs"),
    ("SIMHOST_HEALTH_POLL_SECONDS", "1.0", "/health answer latency (SGLang polls every 1 s)"),
]

FAULTS: list[tuple[str, str]] = [
    ("zombie", "loads weights, then the log stops and the port is never bound; processes keep memory"),
    ("crash_on_first_request", "first non-warm-up generation crashes the scheduler (AttributeError)"),
    (
        "crash_mid_benchmark",
        "like crash_on_first_request, once SIMHOST_CRASH_AFTER_REQUESTS non-warm-up requests were served",
    ),
    ("oom_capture", "CUDA out of memory during CUDA graph capture; the server exits"),
    ("ignore_sigterm", "one scheduler ignores SIGTERM and outlives the server until SIGKILL"),
    ("leak", "one scheduler's GPU memory stays reported by nvidia-smi after it exits"),
    ("health_flaky", "/health answers 503 (empty) for SIMHOST_FLAKY_SECONDS after ready"),
    ("log_flood", "prints SIMHOST_FLOOD_LINES_PER_S extra log lines per second once ready"),
    ("env_drop", "scheduler processes start without the variables in SIMHOST_ENV_DROP"),
    ("reject_requests", "healthy, but every non-warm-up generation answers HTTP 500 with an error body"),
    ("draft_bug", "a speculative server's outputs change after SIMHOST_DRAFT_BUG_AFTER tokens (a buggy draft path)"),
    (
        "output_loop",
        "every server: SIMHOST_LOOP_SHARE of prompts loop after SIMHOST_LOOP_AFTER_TOKENS output tokens (the last "
        "SIMHOST_LOOP_PERIOD tokens repeat); a draft accepts a loop almost perfectly",
    ),
    ("output_loop_speculative", "output_loop on speculative servers only (the candidate's outputs then differ)"),
    (
        "template_mismatch",
        "a speculative server applies another prompt template: SIMHOST_TEMPLATE_EXTRA_TOKENS more prompt tokens per "
        "request and outputs that differ from the first token",
    ),
    ("warmup_exception", "an ASGI exception traceback during warm-up (a client that went away); the server lives on"),
]

SGLANG_ENVS: list[tuple[str, str]] = [
    ("SGLANG_ENABLE_SPEC_V2", "overlap scheduler for EAGLE/EAGLE3 with topk 1 (a little faster)"),
    ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "allow a draft/context shorter than the target context"),
    ("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "false: /health answers 200 at once when up"),
    ("SGLANG_LOG_MS", "milliseconds in log timestamps"),
    ("EAGLE3_PROFILE", "1: one `EAGLE3 profile:` timing line per verify step (speculative runs, rank 0)"),
    ("EAGLE3_PROFILE_EVERY", "with EAGLE3_PROFILE: print every Nth verify step only (default 1)"),
]


def get(name: str, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    default = next(d for n, d, _ in KNOBS if n == name)
    return env.get(name, default)


def get_float(name: str, env: Mapping[str, str] | None = None) -> float:
    return float(get(name, env) or 0)


def gpu_memory_mib(env: Mapping[str, str] | None = None) -> int:
    return int(get("SIMHOST_GPU_MEMORY_MIB", env))


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("SIMHOST_STATE_DIR") or f"/tmp/simhost-{os.getuid()}")


def epilog() -> str:
    lines = ["simulator knobs (environment variables):"]
    faults = ", ".join(name for name, _ in FAULTS)
    for name, default, text in KNOBS:
        text = text.replace("FAULTS_HELP", faults)
        lines.append(f"  {name} (default {default or 'unset'}): {text}")
    lines.append("faults:")
    lines += [f"  {name}: {text}" for name, text in FAULTS]
    lines.append("SGLang environment variables honoured:")
    lines += [f"  {name}: {text}" for name, text in SGLANG_ENVS]
    return "\n".join(lines)
