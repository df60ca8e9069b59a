"""Per-request rows from a result file's details (pure): SGLang `bench_serving --output-details` and
`vllm bench serve --save-detailed` keep, beside the cell's summary, one entry per request in parallel arrays:
`ttfts` (seconds), `itls` (each request's gaps between chunks, seconds), `output_lens` and `errors` ("" for a
request that succeeded). specdash turns them into the request rows its own client stores (`analysis.slo`'s
REQUEST_FIELDS), so goodput and SLO attainment are judged on an imported cell as on a measured one.

Both tools time a request from its send to its last chunk, and each gap from one chunk to the next, so a request's
end-to-end latency is its TTFT plus the sum of its gaps, and its TPOT (latency - TTFT) / (output tokens - 1), as
both tools define them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from experiments.analysis import slo

DETAIL_ARRAYS = ("ttfts", "itls", "output_lens")


def request_rows(row: dict[str, Any], fail: Callable[[str, str], None]) -> list[dict[str, Any]] | None:
    """The line's request rows, or None when it holds no details (a file written without them). A detail that is
    not as the tools write it is reported through `fail(field, message)` and gives None: nothing is guessed."""
    present = [name for name in DETAIL_ARRAYS if row.get(name) is not None]
    if not present:
        return None
    if len(present) < len(DETAIL_ARRAYS):
        missing = ", ".join(name for name in DETAIL_ARRAYS if name not in present)
        fail(present[0], f"request details need {', '.join(DETAIL_ARRAYS)} together; missing {missing}")
        return None
    arrays = {name: row[name] for name in (*DETAIL_ARRAYS, "errors") if row.get(name) is not None}
    for name, values in arrays.items():
        if not isinstance(values, list) or len(values) > slo.MAX_REQUESTS:
            fail(name, f"not a list of at most {slo.MAX_REQUESTS} entries")
            return None
    counts = {len(values) for values in arrays.values()}
    if len(counts) != 1:
        sizes = ", ".join(f"{name} {len(values)}" for name, values in arrays.items())
        fail("ttfts", f"the request details differ in length ({sizes})")
        return None
    errors = arrays.get("errors") or [""] * len(arrays["ttfts"])
    rows = []
    for index, (ttft, gaps, output_len, error) in enumerate(
        zip(arrays["ttfts"], arrays["itls"], arrays["output_lens"], errors, strict=True)
    ):
        made = _request_row(ttft, gaps, output_len, error)
        if isinstance(made, str):
            fail(f"request {index}", made)
            return None
        rows.append(made)
    return rows


def _request_row(ttft: Any, gaps: Any, output_len: Any, error: Any) -> dict[str, Any] | str:
    """One request's row, or what is wrong with its details."""
    if not isinstance(error, str):
        return "errors: not text"
    if type(output_len) is not int or not 0 <= output_len <= slo.MAX_OUTPUT_LEN:
        return "output_lens: not a token count"
    if error:  # a failed request counts against attainment; it has no latencies
        return {"ok": False, "output_len": output_len, **dict.fromkeys(f"{m}_ms" for m in slo.METRICS)}
    if not _seconds(ttft):
        return "ttfts: not a number of seconds"
    if not isinstance(gaps, list) or not all(_seconds(gap) for gap in gaps):
        return "itls: not a list of numbers of seconds"
    latency = ttft + math.fsum(gaps)
    row: dict[str, Any] = {
        "ok": True,
        "output_len": output_len,
        "ttft_ms": ttft * 1000.0,
        "tpot_ms": (latency - ttft) / (output_len - 1) * 1000.0 if output_len > 1 else None,
        "itl_ms": math.fsum(gaps) / len(gaps) * 1000.0 if gaps else None,
        "e2e_latency_ms": latency * 1000.0,
    }
    checked, problems = slo.checked_requests([row])
    return problems[0] if problems else checked[0]


def _seconds(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= slo.MAX_LATENCY_MS / 1000
    )
