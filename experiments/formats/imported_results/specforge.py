"""`specforge benchmark --output-json` JSON (pure): one model at one concurrency, neither named by the file, so the
importer states them (`GIVEN`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import (
    DATASET_MAX,
    MAX_ERRORS,
    Cell,
    Checker,
    Given,
    ImportedRun,
    ResultFileError,
    is_scalar,
    one_object,
    read_given,
    text_of,
)
from .common import GIVEN as COMMON_GIVEN

GIVEN = COMMON_GIVEN  # every format takes the same names (common.GIVEN)
STATED_AT = {name: f"given.{name}" for name in COMMON_GIVEN}


def parse(content: str, given: Mapping[str, Any] | Given) -> list[ImportedRun]:
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
    if not isinstance(given, Given):
        given = read_given(given, errors)
    # Neither the model nor the concurrency is in the file: the importer states both (specforge's own flags).
    stated = Checker(1, errors)
    server = given.server(stated, {}, where=STATED_AT, why="a SpecForge benchmark file does not name its model")
    concurrency = given.require(
        "concurrency", None, stated, where="concurrency", why="a SpecForge benchmark file does not hold it"
    )
    if latency == 0:
        check.fail("latency_seconds", "zero: no throughput can be read")
    if errors or samples is None or latency is None or throughput is None or concurrency is None or server is None:
        raise ResultFileError(errors[:MAX_ERRORS])
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
            server=server,
            server_args={},
            dataset=text_of(row.get("dataset"))[:DATASET_MAX] or "specforge",
            input_len=1,
            output_len=output_len,
            num_prompts=samples,
            cells=[cell],
            engine=given.engine or "",
        )
    ]
