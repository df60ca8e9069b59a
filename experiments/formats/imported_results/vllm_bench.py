"""`vllm bench serve` JSON (pure): one result, one cell; a `speculative_config` given with `--metadata` names the
method."""

from __future__ import annotations

from typing import Any

from experiments.rules import launch_fields

from .. import bounded_json
from .bench_serving import REQUIRED, STATS
from .common import (
    DATASET_MAX,
    MAX_ERRORS,
    MAX_TEXT,
    Checker,
    Given,
    ImportedRun,
    ResultFileError,
    length,
    measured_at,
    num_prompts,
    one_object,
    read_cell,
    text_of,
)

OPTIONAL = {
    "total_token_throughput": "total_throughput",
    "failed": "failed",
    # 1 + accepted / drafts from the server's counters over the run: the pooled figure.
    "spec_decode_acceptance_length": "pooled_accept_length",
    **{f"{s}_{m}_ms": f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl") for s in STATS},
    **{f"{s}_e2el_ms": f"{s}_e2e_latency_ms" for s in STATS},  # vLLM calls end-to-end latency e2el
}
# vLLM's methods in SGLang's spelling, the names every reader gives (the config is made a vLLM one when filed).
METHODS = {vllm: sglang for sglang, vllm in launch_fields.METHOD_EQUIVALENTS.items()} | {"deepseek_mtp": "NEXTN"}
STATED_AT = {
    "model_path": "model_id",
    "tp_size": "tensor_parallel_size",
    "speculative_algorithm": "speculative_config.method",
    "speculative_draft_model_path": "speculative_config.model",
    "speculative_num_steps": "speculative_config.num_speculative_tokens",
    "speculative_eagle_topk": "speculative_config.num_speculative_tokens",
    "speculative_num_draft_tokens": "speculative_config.num_speculative_tokens",
}


def parse(content: str, given: Given | None = None) -> list[ImportedRun]:
    given = given or Given()
    errors: list[str] = []
    check = Checker(1, errors)
    row = one_object(content, "vllm bench serve")
    model = row.get("model_id")
    if model is not None and (not isinstance(model, str) or not model):
        check.fail("model_id", "not text")
        model = None
    cell = read_cell(row, check, REQUIRED, OPTIONAL, concurrency_key="max_concurrency", given=given)
    spec = _vllm_speculative(row, check)
    tp = check.integer(row, "tensor_parallel_size", optional=True, minimum=1)
    # vLLM's JSON holds no server args: the speculative settings are the file's only where --metadata gave them.
    said = {"model_path": model, "tp_size": tp, **spec}
    server = given.server(check, said, where=STATED_AT, why="missing (the file does not name the served model)")
    engine = given.resolve("engine", "vllm", check, where="backend")
    if errors or cell is None or server is None:
        raise ResultFileError(errors[:MAX_ERRORS])
    if cell.metrics.get("total_throughput") is None:
        check.fail("total_token_throughput", "missing")
        raise ResultFileError(errors)
    version = row.get("vllm_version") or row.get("version")
    return [
        ImportedRun(
            tool="vllm bench serve",
            version=str(version)[:MAX_TEXT] if isinstance(version, str | int | float) else "",
            command=text_of(row.get("command")),
            server=server,
            server_args={},
            dataset=text_of(row.get("dataset_name"))[:DATASET_MAX] or "random",
            input_len=length(row.get("random_input_len"), row, "total_input_tokens"),
            output_len=length(row.get("random_output_len"), row, "total_output_tokens"),
            num_prompts=num_prompts(row),
            cells=[cell],
            engine=engine or "vllm",
            measured_at=measured_at(row.get("date")),
        )
    ]


def _vllm_speculative(row: dict[str, Any], check: Checker) -> dict[str, Any]:
    """vLLM's JSON holds no server args; a `speculative_config` given with `--metadata` names the method."""
    config = row.get("speculative_config")
    if config is None:
        return {}
    if isinstance(config, str):
        try:
            config = bounded_json.loads(config, allow_nan=True)
        except ValueError:
            config = None
    if not isinstance(config, dict):
        check.fail("speculative_config", "not an object")
        return {}
    method = config.get("method")
    algorithm = METHODS.get(str(method).lower()) if method is not None else None
    if algorithm is None:
        check.fail("speculative_config.method", f"unknown method {str(method)[:40]!r}")
        return {}
    spec: dict[str, Any] = {"speculative_algorithm": algorithm}
    if isinstance(config.get("model"), str) and config["model"]:
        spec["speculative_draft_model_path"] = config["model"][:MAX_TEXT]
    steps = check.integer(config, "num_speculative_tokens", prefix="speculative_config.", optional=True)
    if steps is not None:
        # vLLM drafts a chain, one token per step: SGLang's topk 1, whose tree holds steps + 1 tokens.
        spec["speculative_num_steps"] = steps
        spec["speculative_eagle_topk"] = 1
        spec["speculative_num_draft_tokens"] = steps + 1
    return spec
