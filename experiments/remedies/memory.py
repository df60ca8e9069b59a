"""Remedies of GPU memory running out and of CUDA-graph capture failing: the static memory fraction, the captured
batch sizes, PyTorch's allocator, no CUDA graphs at all. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .values import Change, Evidence, Link, Remedy, as_number, first_line, flag_value

MEM_FRACTION_FLAG = "--mem-fraction-static"
# SGLang's own advice steps 0.8 -> 0.7; a twentieth is enough to free a CUDA graph's or a few batches' worth of an
# H200's memory (7 GiB) without giving up much of the KV pool.
MEM_FRACTION_STEP = 0.05
# Below this the weights alone rarely fit: more GPUs (tp) or a smaller model is the fix, not a lower fraction.
MEM_FRACTION_MIN = 0.5
MEM_FRACTION_MAX = 0.95
# 0.5.14+ ("era C") renamed the CUDA-graph flags; from 0.5.20 the old --cuda-graph-max-bs is an ambiguous prefix
# that argparse refuses, so the flag must be the one the server knows.
GRAPH_BS_FLAG = "--cuda-graph-max-bs"
GRAPH_BS_FLAG_ERA_C = "--cuda-graph-max-bs-decode"
DISABLE_GRAPH: tuple[str, str | None] = ("--disable-cuda-graph", None)
DISABLE_GRAPH_ERA_C: tuple[str, str | None] = ("--cuda-graph-backend-decode", "disabled")
ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE_SEGMENTS = "expandable_segments:True"
CAPTURE_FAILED = re.compile(r"Capture (?:\w+ )*cuda graph failed", re.IGNORECASE)
# Not a bare "CUDA graph": PyTorch's OOM text mentions "private pools (e.g., CUDA Graphs)" whenever it runs out.
_DURING_CAPTURE = re.compile(r"Capture (?:\w+ )*cuda graph|Capturing batches|cuda_graph_runner", re.IGNORECASE)
_NOT_ENOUGH_MEMORY = re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static")
_REPORTED_FRACTION = re.compile(r"mem_fraction_static=([\d.]+)")
# SGLang's "Possible solutions" under a failed capture: "(e.g., 0.8 or 0.7)", "(e.g., 16)".
_SUGGESTED_FRACTION = re.compile(r"--mem-fraction-static to a smaller value \(e\.g\., ([\d.]+)")
_SUGGESTED_GRAPH_BS = re.compile(r"--cuda-graph-max-bs(?:-decode)? to a smaller value \(e\.g\., (\d+)\)")
_TRIED = re.compile(r"Tried to allocate ([\d.]+ [KMGT]?i?B)")
_GPU_FREE = re.compile(r"(GPU \d+) has a total capacity of ([\d.]+ [KMGT]?i?B) of which ([\d.]+ [KMGT]?i?B) is free")


def gpu_oom_remedies(evidence: Evidence, spec: Mapping[str, Any]) -> list[Remedy | None]:
    text = evidence.text
    cited = _oom_citation(text)
    if _NOT_ENOUGH_MEMORY.search(text):
        return [_raise_mem_fraction(evidence, spec, cited)]
    lower = _lower_mem_fraction(evidence, spec, cited)
    capture = evidence.server_facts.get("capture_progress")
    # A capture bar stopped short of 100% is the server dying mid-capture, whatever the error says.
    if not _DURING_CAPTURE.search(text) and not (capture is not None and capture < 100):
        return [lower, _graph_batch(evidence, spec, cited), _expandable_segments(evidence, spec, cited)]
    return [
        _graph_batch(evidence, spec, cited),
        lower,
        _expandable_segments(evidence, spec, cited),
        disable_graphs(evidence, spec, cited),
    ]


def _oom_citation(text: str) -> str:
    tried, free = _TRIED.search(text), _GPU_FREE.search(text)
    if tried and free:
        return (
            f"The server ran out of GPU memory: it tried to allocate {tried.group(1)} on {free.group(1)} "
            f"({free.group(2)}) with {free.group(3)} free."
        )
    if tried:
        return f"The server ran out of GPU memory: it tried to allocate {tried.group(1)}."
    return f"The server ran out of GPU memory: “{first_line(text)}”."


def _current_mem_fraction(evidence: Evidence, args: Sequence[str]) -> tuple[float | None, str]:
    """The fraction the failed server used, and who set it."""
    given = as_number(flag_value(args, MEM_FRACTION_FLAG))
    if given is not None:
        return given, "the config sets"
    chosen = as_number(evidence.server_args.get("mem_fraction_static"))
    if chosen is not None:
        return chosen, "SGLang chose"
    if match := _REPORTED_FRACTION.search(evidence.text):
        return as_number(match.group(1)), "SGLang reported"
    return None, ""


def _lower_mem_fraction(evidence: Evidence, spec: Mapping[str, Any], cited: str) -> Remedy:
    title = "Lower the static memory fraction"
    why = (
        f"A lower {MEM_FRACTION_FLAG} shrinks the static pool (weights and KV cache) and leaves more memory for "
        "activations and CUDA graphs; the KV pool, and so the largest batch, gets smaller"
    )
    current, who = _current_mem_fraction(evidence, spec.get("extra_args") or [])
    if current is not None:
        new = round(current - MEM_FRACTION_STEP, 2)
        if new < MEM_FRACTION_MIN:
            return Remedy(
                "mem-fraction",
                "Use more GPUs or a smaller model",
                f"{cited} {who} {MEM_FRACTION_FLAG} {current:g} already: lower still leaves the weights no room. "
                "More GPUs (a higher tp) or a smaller model is the way out.",
                link=Link.COPY,
            )
        cause = f"{why} ({who} {current:g})."
    elif suggested := _SUGGESTED_FRACTION.search(evidence.text):
        new, cause = float(suggested.group(1)), f"{why}; SGLang suggests {suggested.group(1)}."
    else:
        return Remedy(
            "mem-fraction",
            title,
            f"{cited} {why}. The fraction the server used is not known (its log has no server_args line): set "
            f"{MEM_FRACTION_FLAG} a little below it.",
        )
    return Remedy(
        "mem-fraction",
        f"{title}: {MEM_FRACTION_FLAG} {new:g}",
        f"{cited} {cause}",
        Change(args={MEM_FRACTION_FLAG: f"{new:g}"}),
        label=f"mem {new:g}",
    )


def _raise_mem_fraction(evidence: Evidence, spec: Mapping[str, Any], cited: str) -> Remedy | None:
    """SGLang's "Not enough memory": the KV pool left after the weights is too small, the opposite of an OOM."""
    current, who = _current_mem_fraction(evidence, spec.get("extra_args") or [])
    why = (
        "SGLang says the memory left for the KV cache after the weights is too small and asks for a higher "
        f"{MEM_FRACTION_FLAG}"
    )
    if current is None:
        return Remedy(
            "mem-fraction",
            "Give the weights and KV cache more memory",
            f"{cited} {why}. The fraction the server used is not known: set {MEM_FRACTION_FLAG} a little above it, "
            "or use more GPUs (a higher tp).",
        )
    if current >= MEM_FRACTION_MAX:
        return Remedy(
            "mem-fraction",
            "Use more GPUs or a smaller model",
            f"{cited} {why}, but {who} {current:g} already: more GPUs (a higher tp) or a smaller model is the way out.",
            link=Link.COPY,
        )
    new = min(round(current + MEM_FRACTION_STEP, 2), MEM_FRACTION_MAX)
    return Remedy(
        "mem-fraction",
        f"Give the weights and KV cache more memory: {MEM_FRACTION_FLAG} {new:g}",
        f"{cited} {why} ({who} {current:g}).",
        Change(args={MEM_FRACTION_FLAG: f"{new:g}"}),
        label=f"mem {new:g}",
    )


def _graph_batch(evidence: Evidence, spec: Mapping[str, Any], cited: str) -> Remedy | None:
    args = list(spec.get("extra_args") or [])
    flag = GRAPH_BS_FLAG_ERA_C if _is_era_c(evidence, args) else GRAPH_BS_FLAG
    why = (
        f"CUDA graphs are captured for every batch size up to {flag}, each holding memory of its own; halving it "
        "frees that memory, and batches above it run without a graph"
    )
    current = as_number(flag_value(args, flag))
    who = "the config sets"
    if current is None:
        current = as_number(evidence.server_args.get(flag[2:].replace("-", "_")))
        who = "SGLang chose"
    if current is not None:
        if current <= 1:
            return None  # nothing left to halve: no CUDA graphs at all is the next step
        new = max(int(current) // 2, 1)
        cause = f"{why} ({who} {int(current)})."
    elif suggested := _SUGGESTED_GRAPH_BS.search(evidence.text):
        new, cause = int(suggested.group(1)), f"{why}; SGLang suggests {suggested.group(1)}."
    else:
        return Remedy(
            "cuda-graph-bs",
            "Capture CUDA graphs for smaller batches",
            f"{cited} {why}. The value the server used is not known (its log has no server_args line): set "
            f"{flag} to half of it.",
        )
    return Remedy(
        "cuda-graph-bs",
        f"Capture CUDA graphs for smaller batches: {flag} {new}",
        f"{cited} {cause}",
        Change(args={flag: str(new)}),
        label=f"graph bs {new}",
    )


def _expandable_segments(evidence: Evidence, spec: Mapping[str, Any], cited: str) -> Remedy | None:
    if EXPANDABLE_SEGMENTS not in evidence.text or ALLOC_CONF_ENV in (spec.get("env") or {}):
        return None
    return Remedy(
        "expandable-segments",
        f"Let PyTorch's allocator grow its segments ({ALLOC_CONF_ENV}={EXPANDABLE_SEGMENTS})",
        f"{cited} PyTorch's own advice in the error: when much memory is reserved but unallocated, the cache is "
        f"fragmented, and {ALLOC_CONF_ENV}={EXPANDABLE_SEGMENTS} lets it reuse that memory.",
        Change(env={ALLOC_CONF_ENV: EXPANDABLE_SEGMENTS}),
        label="expandable segments",
    )


def disable_graphs(evidence: Evidence, spec: Mapping[str, Any], cited: str) -> Remedy | None:
    args = list(spec.get("extra_args") or [])
    flag, value = DISABLE_GRAPH_ERA_C if _is_era_c(evidence, args) else DISABLE_GRAPH
    server = evidence.server_args
    given = flag_value(args, DISABLE_GRAPH[0]) == "" or flag_value(args, DISABLE_GRAPH_ERA_C[0]) == "disabled"
    if given or server.get("disable_cuda_graph") is True or server.get("cuda_graph_backend_decode") == "disabled":
        return None  # already without graphs: this is not the way out
    change = Change(args={flag: value})
    return Remedy(
        "no-cuda-graph",
        f"Run without CUDA graphs ({change.describe()})",
        f"{cited} Without CUDA graphs nothing is captured and the server starts, but every decode step is slower "
        "(SGLang: “Huge performance loss”): it measures a different server, and tells a capture problem apart "
        "from the rest.",
        change,
        label="no cuda graph",
    )


def _is_era_c(evidence: Evidence, args: Sequence[str]) -> bool:
    """Whether the server knows the 0.5.14+ CUDA-graph flags (its args have them, or the config or SGLang used them)."""
    if {"cuda_graph_max_bs_decode", "cuda_graph_backend_decode"} & set(evidence.server_args):
        return True
    flags = (GRAPH_BS_FLAG_ERA_C, DISABLE_GRAPH_ERA_C[0])
    return any(flag in evidence.text for flag in flags) or any(a.startswith(flags) for a in args)
