"""`specforge benchmark --output-json` JSON (pure): one model at one concurrency, neither named by the file, so the
importer states them (`GIVEN`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import (
    DATASET_MAX,
    MAX_ERRORS,
    MAX_TEXT,
    SPEC_FIELDS,
    Cell,
    Checker,
    ImportedRun,
    ResultFileError,
    Server,
    is_scalar,
    one_object,
    text_of,
)

GIVEN = ("model_path", "concurrency", "tp_size", *SPEC_FIELDS)
# vLLM's `speculative_config.method` -> SGLang's algorithm names, which specdash's configs use.


def parse(content: str, given: Mapping[str, Any]) -> list[ImportedRun]:
    """`specforge benchmark --output-json`: `{backend, dataset, samples, output_tokens, latency_seconds,
    throughput_tokens_per_second, average_acceptance_length, spec_verify_count}` for one model at one concurrency,
    neither of which the file names, so the importer states them (`given`). Its accept length is the unweighted
    mean of the requests' own (kept raw under that name); specdash's column takes the token-weighted figure,
    output_tokens / spec_verify_count, when the file has both."""
    errors: list[str] = []
    check = Checker(1, errors)
    row = one_object(content, "specforge benchmark")
    samples = check.integer(row, "samples", minimum=1)
    latency = check.number(row, "latency_seconds")
    throughput = check.number(row, "throughput_tokens_per_second")
    output_tokens = check.integer(row, "output_tokens", optional=True)
    verify = check.integer(row, "spec_verify_count", optional=True)
    mean_accept = check.number(row, "average_acceptance_length", optional=True)
    stated = Checker(0, errors)
    for name in given:
        if name not in GIVEN:
            errors.append(f"{name}: not something a SpecForge import states (one of {', '.join(GIVEN)})")
    model = given.get("model_path")
    if not isinstance(model, str) or not model.strip() or len(model) > MAX_TEXT:
        errors.append(f"model_path: the served model's path is required (the file does not hold it; <= {MAX_TEXT})")
    concurrency = stated.integer(dict(given), "concurrency", minimum=1)
    tp = stated.integer(dict(given), "tp_size", optional=True, minimum=1)
    spec: dict[str, Any] = {}
    for name in SPEC_FIELDS:
        value = given.get(name)
        if value is None:
            continue
        if name in ("speculative_algorithm", "speculative_draft_model_path"):
            if not isinstance(value, str) or len(value) > MAX_TEXT:
                errors.append(f"{name}: text of at most {MAX_TEXT} characters")
            else:
                spec[name] = value
        elif (number := stated.integer(dict(given), name, minimum=1)) is not None:
            spec[name] = number
    if latency == 0:
        check.fail("latency_seconds", "zero: no throughput can be read")
    if errors or samples is None or latency is None or throughput is None or concurrency is None:
        raise ResultFileError([e.replace("line 0: ", "") for e in errors][:MAX_ERRORS])
    assert isinstance(model, str)
    # Its output tokens over its verify steps are the token-weighted figure; its average is a mean of requests.
    token_weighted = output_tokens / verify if output_tokens and verify else None
    metrics = {
        "duration_s": latency,
        "completed": samples,
        "output_throughput": throughput,
        # The file counts no input tokens: its total is its output, and says so (raw).
        "total_throughput": throughput,
        "request_throughput": samples / latency,
        "accept_length": token_weighted,
        "mean_request_accept_length": mean_accept,
    }
    mapped = {"samples", "latency_seconds", "throughput_tokens_per_second"}
    raw = {k: v for k, v in row.items() if k not in mapped and is_scalar(v)}
    raw["total_throughput_counts"] = "output tokens only: the file holds no input token count"
    cell = Cell(concurrency=concurrency, line=1, metrics=metrics, raw=raw)
    output_len = max(1, round(output_tokens / samples)) if output_tokens else 1
    return [
        ImportedRun(
            tool="specforge benchmark",
            version="",
            command="",
            server=Server(model_path=model.strip()[:MAX_TEXT], tp_size=tp or 1, speculative=spec),
            server_args={},
            dataset=text_of(row.get("dataset"))[:DATASET_MAX] or "specforge",
            input_len=1,
            output_len=output_len,
            num_prompts=samples,
            cells=[cell],
        )
    ]
