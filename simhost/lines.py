"""The `Prefill batch` / `Decode batch` line formats of each SGLang version (reference §3.3, §3.4). Pure."""

from __future__ import annotations

from simhost.versions import Version


def _head(ver: Version, kind: str, iters: int | None) -> str:
    # SGLANG_LOG_FORWARD_ITERS inserts ` [N]` after `Prefill batch` / `Decode batch`
    return f"{kind} batch{f' [{iters}]' if iters is not None else ''}{ver.batch_separator}"


def prefill(
    ver: Version,
    new_seq: int,
    new_token: int,
    cached: int,
    usage: float,
    running: int,
    queue: int,
    throughput: float,
    graph: bool = False,
    iters: int | None = None,
) -> str:
    body = (
        f"#new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached}, token usage: {usage:.2f}, "
        f"#running-req: {running}, #queue-req: {queue}"
    )
    tail = ver.prefill_tail
    if tail == "comma":
        body += ", "
    elif tail == "v059":
        body += f", input throughput (token/s): {throughput:.2f}, cuda graph: {graph}"
    elif tail == "v0510":
        body += f", cuda graph: {graph}, input throughput (token/s): {throughput:.2f}"
    else:
        body += f", #pending-token: 0, cuda graph: {graph}, input throughput (token/s): {throughput:.2f}"
    return _head(ver, "Prefill", iters) + body


def decode(
    ver: Version,
    running: int,
    tokens: int,
    usage: float,
    spec: tuple[float, float] | None,
    graph: bool,
    gen_throughput: float,
    queue: int,
    iters: int | None = None,
) -> str:
    accept = f"accept len: {spec[0]:.2f}, accept rate: {spec[1]:.2f}, " if spec else ""
    body = (
        f"#running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, {accept}cuda graph: {graph}, "
        f"gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue}"
    )
    if ver.decode_trailing_comma:
        body += ", "
    return _head(ver, "Decode", iters) + body
