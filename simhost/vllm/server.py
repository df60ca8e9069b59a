"""vLLM's HTTP side on aiohttp (reference §2.2, §6): /health, /ping, /version, /load, /metrics, /v1/models,
/v1/completions, /v1/chat/completions, uvicorn-style access lines, and what a dead engine does to them. Over 400
lines because the two OpenAI endpoints' streaming and non-streaming shapes differ field by field."""

from __future__ import annotations

import http
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from simhost import acceptance
from simhost.engine import Request, word_ids
from simhost.vllm import metrics
from simhost.vllm.args import EngineSetup
from simhost.vllm.engine import VllmEngine
from simhost.vllm.logs import STDOUT, ProcLog
from simhost.vllm.versions import VllmVersion

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# prometheus_client's CONTENT_TYPE_LATEST (text format 0.0.4)
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


@dataclass
class State:
    ver: VllmVersion
    setup: EngineSetup
    engine: VllmEngine
    log: ProcLog
    faults: frozenset[str]
    crash: Callable[[], None] | None = None  # crash_on_first_request / crash_mid_benchmark
    crash_after: int = 0
    draft_bug_after: int = 8
    nondeterminism: float = 0.0
    dead: bool = False
    created: float = field(default_factory=time.time)
    in_flight: set[Request] = field(default_factory=set)

    @property
    def max_model_len(self) -> int:
        return self.setup.max_model_len

    def engine_died(self) -> None:
        self.dead = True
        for req in self.in_flight:
            req.changed.set()


STATE: web.AppKey[State] = web.AppKey("vllm_state", State)


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(", ", ": "), ensure_ascii=False)


def error_response(state: State, message: str, kind: str = "BadRequestError", status: int = 400) -> web.Response:
    """vLLM's ErrorResponse: flat up to 0.9.2, nested under "error" from 0.10."""
    body = {"message": message, "type": kind, "param": None, "code": status}
    obj = {"error": body} if state.ver.nested_errors else {"object": "error", **body}
    return web.Response(text=dumps(obj), status=status, content_type="application/json")


async def _on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    state = request.app[STATE]
    if state.setup.args.disable_uvicorn_access_log:
        return
    peer = request.transport.get_extra_info("peername") if request.transport else None
    client = f"{peer[0]}:{peer[1]}" if peer else "-"
    try:
        phrase = http.HTTPStatus(response.status).phrase
    except ValueError:
        phrase = ""
    version = f"{request.version.major}.{request.version.minor}"
    state.log.uvicorn(
        f'{client} - "{request.method} {request.path_qs} HTTP/{version}" {response.status} {phrase}', STDOUT
    )


@web.middleware
async def _not_found_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return web.json_response({"detail": "Not Found"}, status=404)
    except web.HTTPMethodNotAllowed:
        return web.json_response({"detail": "Method Not Allowed"}, status=405)


# ----------------------------------------------------------------------------------------------- small endpoints


async def health(request: web.Request) -> web.Response:
    """200 with an empty body; a dead engine: 500 (<= 0.10.2) or 503 (0.11+), empty."""
    state = request.app[STATE]
    if state.dead:
        return web.Response(status=state.ver.health_dead_status)
    return web.Response(status=200)


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": request.app[STATE].ver.text})


async def load(request: web.Request) -> web.Response:
    return web.json_response({"server_load": 0})


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    a = state.setup.args
    now = int(time.time())
    card = {
        "id": a.served_model_name,
        "object": "model",
        "created": now,
        "owned_by": "vllm",
        "root": a.model,
        "parent": None,
        "max_model_len": state.max_model_len,
        "permission": [
            {
                "id": f"modelperm-{uuid.uuid4().hex}",
                "object": "model_permission",
                "created": now,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }
    return web.json_response({"object": "list", "data": [card]}, dumps=dumps)


async def metrics_endpoint(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.setup.args.disable_log_stats:  # no StatLoggerManager: no vllm:* metric at all (§1.4)
        return web.Response(text="", headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})
    engine = state.engine
    st = engine.stats
    _, usage = engine.token_usage()
    totals = engine.totals
    snap = metrics.Snapshot(
        model_name=state.setup.args.served_model_name,
        created=state.created,
        running=len(engine.running),
        waiting=len(engine.waiting),
        kv_usage=usage,
        prompt_tokens=st.prompt_tokens,
        generation_tokens=st.generation_tokens,
        finished_requests=st.finished_requests,
        prefix_queries=st.prompt_tokens,
        prefix_hits=st.cached_tokens,
        e2e_sum=st.e2e_latency_sum,
        e2e_count=st.e2e_latency_count,
        e2e_buckets=st.e2e_latency_buckets,
        spec=(totals.num_drafts, totals.num_draft_tokens, totals.num_accepted, list(totals.per_position))
        if engine.cfg.algorithm
        else None,
    )
    return web.Response(text=metrics.exposition(snap), headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    """A development endpoint (VLLM_SERVER_DEV_MODE=1): `vllm bench sweep` posts it between runs."""
    request.app[STATE].engine.prefix_cache.clear()
    return web.Response(status=200)


# ----------------------------------------------------------------------------------------------- generation


def _chat_ids(vocab: int, messages: Any) -> list[int]:
    """The prompt of a chat request as simhost's SGLang personality tokenizes it (so both give the same output)."""
    words: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        role = str(message.get("role", "user")) if isinstance(message, dict) else "user"
        words += ["<|im_start|>", role, *str(content or "").split(), "<|im_end|>"]
    return word_ids(words, vocab) or [0]


def _prompt_ids(vocab: int, prompt: Any) -> tuple[list[int] | None, str | None]:
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return word_ids(prompt.split(), vocab) or [0], prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return list(prompt), None
    return None, None


async def _updates(state: State, req: Request, request: web.Request) -> AsyncIterator[None]:
    """Once per wake-up of the request (one or more engine steps), until it finishes or the engine dies."""
    while not req.finished and not state.dead:
        await req.changed.wait()
        req.changed.clear()
        if request.transport is None or request.transport.is_closing():
            req.abort()
            return
        if state.dead:
            return
        yield


async def completions(request: web.Request) -> web.StreamResponse:
    """/v1/completions and /v1/chat/completions (§6)."""
    state = request.app[STATE]
    a = state.setup.args
    chat = request.path.endswith("/chat/completions")
    try:
        body = await request.json()
    except ValueError:
        return error_response(state, "Invalid JSON body")
    model_name = body.get("model") or a.served_model_name
    if model_name != a.served_model_name:
        return error_response(state, f"The model `{model_name}` does not exist.", "NotFoundError", 404)
    vocab = int(state.setup.target.get("vocab_size", 32000))
    text: str | None = None
    if chat:
        ids: list[int] | None = _chat_ids(vocab, body.get("messages"))
    else:
        ids, text = _prompt_ids(vocab, body.get("prompt"))
    if ids is None:
        return error_response(state, "Either prompt or prompt_embeds must be provided and non-empty.")
    limit = state.max_model_len
    if len(ids) >= limit:
        return error_response(
            state,
            f"This model's maximum context length is {limit} tokens. However, your request has {len(ids)} input "
            "tokens. Please reduce the length of the input messages.",
        )
    max_new = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_new is None:
        max_new = 16 if not chat else limit - len(ids)
    if int(max_new) > limit - len(ids):
        return error_response(
            state,
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_new}. This model's maximum context length "
            f"is {limit} tokens and your request has {len(ids)} input tokens ({max_new} > {limit} - {len(ids)}).",
        )
    if "reject_requests" in state.faults:
        return error_response(
            state,
            "Internal server error: generation failed (simhost fault reject_requests).",
            "InternalServerError",
            500,
        )
    if state.dead:
        return web.Response(status=500)
    req = Request(input_ids=ids, max_new_tokens=max(1, int(max_new)))
    req.accept_factor = acceptance.prompt_factor(text)
    if state.engine.cfg.algorithm:
        if "draft_bug" in state.faults:
            req.diverge_at = state.draft_bug_after
        elif state.nondeterminism > 0:
            req.diverge_at = acceptance.late_flip(ids, state.nondeterminism)
    crash_now = state.crash is not None and state.engine.stats.finished_requests >= state.crash_after
    state.in_flight.add(req)
    try:
        if crash_now and state.crash is not None:
            crash, state.crash = state.crash, None
            crash()  # the engine dies; this request is in flight when it does
        else:
            state.engine.submit(req)
        if body.get("stream"):
            return await _stream(state, request, body, req, chat, model_name)
        return await _whole(state, request, body, req, chat, model_name)
    finally:
        state.in_flight.discard(req)
        state.engine.forget(req)


def _spec_metrics(state: State, req: Request) -> dict[str, Any]:
    mode = state.setup.args.per_request_spec_decode_metrics
    if mode == "none" or not state.ver.per_request_spec_metrics:
        return {}
    details = state.engine.request_spec_metrics(req, mode == "detailed")
    return {} if details is None else {"metrics": {"speculative_decoding": details}}


def _usage(ids: int, req: Request) -> dict[str, Any]:
    return {"prompt_tokens": ids, "total_tokens": ids + len(req.output_ids), "completion_tokens": len(req.output_ids)}


async def _whole(
    state: State, request: web.Request, body: dict[str, Any], req: Request, chat: bool, model: str
) -> web.StreamResponse:
    async for _ in _updates(state, req, request):
        pass
    if state.dead:  # engine dead during a non-streaming request: 500, empty body (§2.2)
        return web.Response(status=500)
    head = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{req.rid}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
    }
    if chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": req.text.lstrip(),
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [],
                "reasoning_content": None,
            },
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
        }
    else:
        choice = {"index": 0, "text": req.text, "logprobs": None, "finish_reason": "length", "stop_reason": None}
        if state.ver.return_token_ids:
            choice |= {"prompt_logprobs": None, "prompt_token_ids": None, "token_ids": None}
    usage = {**_usage(len(req.input_ids), req), "prompt_tokens_details": None}
    out = {**head, "choices": [choice], "usage": usage, **_spec_metrics(state, req)}
    return web.Response(text=dumps(out), content_type="application/json")


async def _stream(
    state: State, request: web.Request, body: dict[str, Any], req: Request, chat: bool, model: str
) -> web.StreamResponse:
    """One SSE chunk per engine step, with every token the step accepted (§6)."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await resp.prepare(request)
    head = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{req.rid}",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
    }

    def event(obj: dict[str, Any]) -> str:
        return f"data: {dumps(obj)}\n\n"

    def chunk(piece: str, finish: str | None) -> str:
        if chat:
            # chat chunks are dumped with exclude_unset: only the delta's fields that were set
            delta = {"content": piece}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            if finish is not None:
                choice["stop_reason"] = None
            return event({**head, "choices": [choice]})
        # completion chunks are dumped with exclude_unset=False: every null appears
        c = {"index": 0, "text": piece, "logprobs": None, "finish_reason": finish, "stop_reason": None}
        if state.ver.return_token_ids:
            c |= {"prompt_token_ids": None, "token_ids": None}
        return event({**head, "choices": [c], "usage": None})

    sent_steps, sent_chars, first = 0, 0, True
    async for _ in _updates(state, req, request):
        pieces = []
        if first and chat and req.step_ends:
            # the role chunk goes with the first engine output (serving_chat.py)
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            pieces.append(event({**head, "choices": [role]}))
        for step in req.step_ends[sent_steps:]:
            piece, sent_chars = req.text[sent_chars : step.text_chars], step.text_chars
            last = req.finished and step.tokens == len(req.output_ids)
            pieces.append(chunk(piece, "length" if last else None))
            first = False
        sent_steps = len(req.step_ends)
        if pieces:
            await resp.write("".join(pieces).encode())
    if state.dead:
        # the generator's except branch: an error event, then [DONE] (§4.6)
        error = {"error": {"message": ENGINE_DEAD_MESSAGE, "type": "BadRequestError", "param": None, "code": 400}}
        await resp.write((event(error) + "data: [DONE]\n\n").encode())
        return resp
    if (body.get("stream_options") or {}).get("include_usage"):
        # the usage chunk is dumped with exclude_none
        usage = {**head, "choices": [], "usage": _usage(len(req.input_ids), req), **_spec_metrics(state, req)}
        await resp.write(event(usage).encode())
    await resp.write(b"data: [DONE]\n\n")
    return resp


ROUTES = [
    ("/openapi.json", "HEAD, GET"),
    ("/docs", "HEAD, GET"),
    ("/health", "GET"),
    ("/load", "GET"),
    ("/ping", "POST, GET"),
    ("/version", "GET"),
    ("/v1/models", "GET"),
    ("/v1/completions", "POST"),
    ("/v1/chat/completions", "POST"),
    ("/metrics", "GET"),
]


def build_app(state: State, dev_mode: bool) -> web.Application:
    app = web.Application(middlewares=[_not_found_as_json])
    app[STATE] = state
    app.on_response_prepare.append(_on_prepare)
    r = app.router
    r.add_get("/health", health)
    r.add_get("/ping", health)
    r.add_post("/ping", health)
    r.add_get("/version", version)
    r.add_get("/load", load)
    r.add_get("/metrics", metrics_endpoint)
    r.add_get("/v1/models", models)
    r.add_post("/v1/completions", completions)
    r.add_post("/v1/chat/completions", completions)
    if dev_mode:
        r.add_post("/reset_prefix_cache", reset_prefix_cache)
    return app
