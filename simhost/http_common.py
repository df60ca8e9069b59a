"""HTTP helpers shared by server.py and openai_api.py (state, replies, request start/stream); avoids an import cycle."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from simhost import acceptance, versions
from simhost.engine import Engine, Request, word_ids


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=dumps(obj), status=status, content_type="application/json")


def error_response(message: str, status: int = 400) -> web.Response:
    return json_response(
        {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status},
        status,
    )


@dataclasses.dataclass
class ServerState:
    args: Any
    engine: Engine
    ready: dict[str, Any]
    target: dict[str, Any]
    faults: frozenset[str]
    status: str = "starting"  # starting | up | shutdown
    up_since: float = 0.0
    flaky_seconds: float = 5.0
    health_poll: float = 1.0
    crash: Callable[[], None] | None = None  # crash_on_first_request / crash_mid_benchmark
    crash_after: int = 0
    draft_bug_after: int = 8  # draft_bug: the first output token that differs from the baseline's
    nondeterminism: float = 0.0  # share of prompts whose output flips late (acceptance.late_flip)
    argv: list[str] = dataclasses.field(
        default_factory=list
    )  # finished non-warm-up requests before the next one crashes
    version: versions.Version = dataclasses.field(default_factory=versions.current)
    started: float = dataclasses.field(default_factory=time.time)
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))

    @property
    def context_len(self) -> int:
        return int(self.ready["context_len"])


STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)

# ----------------------------------------------------------------------------------------------- generation


def prompt_ids(state: ServerState, text: Any, input_ids: Any) -> list[int] | None:
    vocab = int(state.target.get("vocab_size", 32000))
    if isinstance(input_ids, list) and input_ids and all(isinstance(t, int) for t in input_ids):
        return list(input_ids)
    if isinstance(text, str):
        return word_ids(text.split(), vocab) or [0]
    return None


async def start_request(
    state: ServerState, ids: list[int], max_new: int, warmup: bool, text: str | None = None
) -> Request | web.Response:
    if len(ids) >= state.context_len:
        return error_response(
            f"The input ({len(ids)} tokens) is longer than the model's context length ({state.context_len} tokens)."
        )
    if not warmup and "reject_requests" in state.faults:
        # Up and healthy, yet every real generation fails: what a broken tokenizer or sampler looks like from outside.
        return error_response("Internal server error: generation failed (simhost fault reject_requests).", status=500)
    if not warmup and state.crash is not None and state.engine.stats.finished_requests >= state.crash_after:
        crash, state.crash = state.crash, None
        crash()
        await asyncio.Future()  # the scheduler is gone; the client hangs until the process tree dies
    req = Request(input_ids=ids, max_new_tokens=max(1, max_new), kind="warmup" if warmup else "generate")
    req.accept_factor = acceptance.prompt_factor(text)
    if state.engine.cfg.algorithm and not warmup:
        if "draft_bug" in state.faults:
            req.diverge_at = state.draft_bug_after
        elif state.nondeterminism > 0:
            req.diverge_at = acceptance.late_flip(ids, state.nondeterminism)
    state.engine.submit(req)
    return req


async def stream_updates(req: Request, request: web.Request):  # type: ignore[no-untyped-def]
    """Yield once per engine step that touched the request, until it finishes; a request whose client has gone is
    aborted (the engine stops generating for it)."""
    while True:
        await req.changed.wait()
        req.changed.clear()
        if request.transport is None or request.transport.is_closing():
            req.abort()
            return
        # Whether the caller's write of this step will hold the end: a request that finishes while that write waits
        # for the socket (its last tokens and `[DONE]` not in it) has set `changed` again, and gets one more round.
        finished = req.finished
        yield
        if finished:
            return


async def sse_response(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    return resp
