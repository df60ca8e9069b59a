"""The HTTP side (SGLang 0.5.9 endpoints and response shapes) on aiohttp, with uvicorn-style access lines."""

from __future__ import annotations

import asyncio
import dataclasses
import http
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from simhost import args as sargs
from simhost import logs, profiler
from simhost.engine import E2E_BUCKETS, Engine, Request
from simhost.http_common import (
    STATE,
    ServerState,
    dumps,
    error_response,
    json_response,
    prompt_ids,
    sse_response,
    start_request,
    stream_updates,
)
from simhost.openai_api import openai

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    client = f"{peer[0]}:{peer[1]}" if peer else "-"
    try:
        phrase = http.HTTPStatus(response.status).phrase
    except ValueError:
        phrase = ""
    line = f'{client} - "{request.method} {request.path_qs} HTTP/{request.version.major}.{request.version.minor}" '
    logs.uvicorn(f"{line}{response.status} {phrase}", fd=logs.STDOUT)


@web.middleware
async def _not_found_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return json_response({"detail": "Not Found"}, 404)
    except web.HTTPMethodNotAllowed:
        return json_response({"detail": "Method Not Allowed"}, 405)


# ----------------------------------------------------------------------------------------------- health/info


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.status == "shutdown":
        logs.line("Health check request received during shutdown. Returning 503.")
        return web.Response(status=503)
    if state.status != "up":
        return web.Response(status=503)
    if "health_flaky" in state.faults and time.monotonic() - state.up_since < state.flaky_seconds:
        return web.Response(status=503)
    generation = os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower() not in (
        "0",
        "false",
    )
    if request.path == "/health" and not generation:
        return web.Response(status=200)
    if state.engine.is_idle:  # an idle server runs a real 1-token prefill; a busy one just signals
        rid = f"HEALTH_CHECK_{uuid.uuid4().hex if state.version.health_rid_uuid else time.time()}"
        state.engine.submit(Request(input_ids=[0], max_new_tokens=1, kind="health", rid=rid))
    await asyncio.sleep(state.health_poll)
    return web.Response(status=200)


async def ready(request: web.Request) -> web.Response:
    """0.5.20+: 200 when up (not paused), else 503; empty body, no generation."""
    state = request.app[STATE]
    return web.Response(status=200 if state.status == "up" else 503)


async def model_info(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if request.path == "/get_model_info" and state.version.new_info_endpoints:
        logs.line(
            "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
            "Please use '/model_info' instead."
        )
    a = state.args
    info: dict[str, Any] = {
        "model_path": a.model_path,
        "tokenizer_path": a.tokenizer_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": a.weight_version,
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": state.target.get("model_type"),
        "architectures": state.target.get("architectures"),
    }
    if state.version.at_least("0.5.23"):
        info |= {
            "served_model_name": a.served_model_name,
            "load_format": a.load_format,
            "reasoning_parser": a.reasoning_parser,
            "tool_call_parser": a.tool_call_parser,
            "disaggregation_mode": "null",
        }
    return json_response(info)


def server_info_dict(state: ServerState) -> dict[str, Any]:
    args = dataclasses.asdict(state.args)
    ready = state.ready
    internal: dict[str, Any] = {
        **args,
        "last_gen_throughput": state.engine.stats.last_gen_throughput,
        "memory_usage": {
            "weight": ready["weight"],
            "kvcache": ready["kvcache"],
            "token_capacity": ready["max_total_num_tokens"],
            "graph": ready["graph"],
        },
        "effective_max_running_requests_per_dp": ready["max_running_requests"],
    }
    accept = state.engine.avg_spec_accept_length
    if accept is not None:
        internal["avg_spec_accept_length"] = accept
    head: dict[str, Any] = dict(args)
    if state.version.at_least("0.5.23"):
        head["launch_command"] = "python3 -m sglang.launch_server " + " ".join(state.argv)
    head |= {
        "status": "ready",
        "max_total_num_tokens": ready["max_total_num_tokens"],
        "max_req_input_len": min(state.context_len - 1, ready["max_total_num_tokens"] - 1),
    }
    if state.version.at_least("0.5.23"):
        head |= {"kv_events": None, "startup_time": state.started}
    head |= {"internal_states": [internal], "version": state.version.text}
    if state.version.at_least("0.5.23"):
        head["frontend"] = "python"
    return head


async def server_info(request: web.Request) -> web.Response:
    if request.path == "/get_server_info" and request.app[STATE].version.new_info_endpoints:
        logs.line(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead."
        )
    return json_response(server_info_dict(request.app[STATE]))


def _model_card(state: ServerState) -> dict[str, Any]:
    name = state.args.served_model_name
    return {
        "id": name,
        "object": "model",
        "created": state.created,
        "owned_by": "sglang",
        "root": name,
        "parent": None,
        "max_model_len": state.context_len,
    }


async def models(request: web.Request) -> web.Response:
    return json_response({"object": "list", "data": [_model_card(request.app[STATE])]})


async def model(request: web.Request) -> web.Response:
    state = request.app[STATE]
    name = request.match_info["model"]
    if name != state.args.served_model_name:
        return json_response(
            {
                "error": {
                    "message": f"The model '{name}' does not exist",
                    "type": "invalid_request_error",
                    "param": "model",
                    "code": "model_not_found",
                }
            },
            404,
        )
    return json_response(_model_card(state))


async def flush_cache(request: web.Request) -> web.Response:
    engine = request.app[STATE].engine
    ok = engine.flush_cache()
    if ok:
        logs.line("Cache flushed successfully!", 0, engine.args.tp_size)
    else:
        logs.line(
            f"Cache not flushed because there are pending requests. #queue-req: {len(engine.waiting)}, "
            f"#running-req: {len(engine.running)}",
            0,
            engine.args.tp_size,
        )
    text = (
        "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
        "requests, the operation will not be performed.)\n"
    )
    return web.Response(text=text, status=200 if ok else 400)


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if not state.args.enable_metrics:
        return json_response({"detail": "Not Found"}, 404)
    e = state.engine
    st = e.stats
    sched = f'engine_type="unified",model_name="{state.args.served_model_name}",pp_rank="0",tp_rank="0"'
    tok = f'model_name="{state.args.served_model_name}"'
    gauges = [
        ("num_running_reqs", "The number of running requests.", st.last_running_reqs),
        ("num_used_tokens", "The number of used tokens.", st.last_used_tokens),
        ("token_usage", "The token usage.", st.last_token_usage),
        ("gen_throughput", "The generation throughput (token/s).", st.last_gen_throughput),
        ("num_queue_reqs", "The number of requests in the waiting queue.", st.last_queue_reqs),
        ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", e.max_total_tokens),
        (
            "spec_accept_length",
            "The average acceptance length of speculative decoding.",
            st.last_accept_length,
        ),
        ("spec_accept_rate", "The average acceptance rate of speculative decoding.", st.last_accept_rate),
        ("is_cuda_graph", "Whether the batch is using CUDA graph.", float(not sargs.cuda_graph_disabled(state.args))),
    ]
    if e.cfg.algorithm and e.ver.spec_step_gauges:
        gauges += [
            ("spec_num_steps", "Currently active speculative_num_steps.", st.last_num_steps),
            ("spec_num_draft_tokens", "Currently active speculative_num_draft_tokens.", st.last_num_draft_tokens),
        ]
    if e.cfg.kind == "DSPARK":  # speculative-observability.md d1: DSpark's own gauges
        gauges += [
            ("spec_cap_length", "The average cap length of DSpark speculative decoding.", st.last_cap_length),
            (
                "spec_block_accept_length",
                "The average block acceptance length of DSpark speculative decoding.",
                st.last_block_accept_length,
            ),
        ]
    counters = [
        ("prompt_tokens_total", "Number of prefill tokens processed.", st.prompt_tokens),
        ("generation_tokens_total", "Number of generation tokens processed.", st.finished_generation_tokens),
        ("num_requests_total", "Number of requests processed.", st.requests),
        ("cached_tokens_total", "Number of cached prompt tokens.", st.cached_tokens),
    ]
    if e.cfg.algorithm:
        counters.append(
            ("spec_verify_calls_total", "The number of speculative verify calls.", st.finished_verify_calls)
        )
    out = []
    for name, text, value in gauges:
        out += [
            f"# HELP sglang:{name} {text}",
            f"# TYPE sglang:{name} gauge",
            f"sglang:{name}{{{sched}}} {float(value)}",
        ]
    for name, text, value in counters:
        out += [
            f"# HELP sglang:{name} {text}",
            f"# TYPE sglang:{name} counter",
            f"sglang:{name}{{{tok}}} {float(value)}",
        ]
    out += _e2e_histogram(st, tok)
    return web.Response(text="\n".join(out) + "\n", content_type="text/plain", charset="utf-8")


def _e2e_histogram(st: Any, labels: str) -> list[str]:
    """sglang:e2e_request_latency_seconds in the text format (cumulative buckets, +Inf, _sum, _count). The simulator
    measures it on its GPU's clock, so what a loaded test machine does to the CPU does not show in it."""
    name = "sglang:e2e_request_latency_seconds"
    out = [
        f"# HELP {name} Histogram of End-to-end request latency in seconds",
        f"# TYPE {name} histogram",
    ]
    for bound, count in zip(E2E_BUCKETS, st.e2e_latency_buckets, strict=True):
        out.append(f'{name}_bucket{{le="{bound}",{labels}}} {float(count)}')
    out.append(f'{name}_bucket{{le="+Inf",{labels}}} {float(st.e2e_latency_count)}')
    out.append(f"{name}_sum{{{labels}}} {st.e2e_latency_sum}")
    out.append(f"{name}_count{{{labels}}} {float(st.e2e_latency_count)}")
    return out


async def start_profile(request: web.Request) -> web.Response:
    return await profiler.start_profile(request, request.app[STATE].engine.profiler)


async def stop_profile(request: web.Request) -> web.Response:
    return await profiler.stop_profile(request, request.app[STATE].engine.profiler)


# ----------------------------------------------------------------------------------------------- generation


async def generate(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        body = await request.json()
    except ValueError:
        return error_response("Invalid JSON body")
    params = body.get("sampling_params") or {}
    ids = prompt_ids(state, body.get("text"), body.get("input_ids"))
    if ids is None:
        return error_response("Either text or input_ids should be provided.")
    text = body.get("text") if isinstance(body.get("text"), str) else None
    warmup = request.headers.get("X-Simhost-Warmup") == "1"
    started = await start_request(state, ids, int(params.get("max_new_tokens", 128)), warmup, text)
    if isinstance(started, web.Response):
        return started
    req = started
    engine = state.engine

    def result() -> dict[str, Any]:
        return {"text": req.text, "output_ids": list(req.output_ids), "meta_info": engine.meta_info(req)}

    if not body.get("stream"):
        async for _ in stream_updates(req, request):
            pass
        return json_response(result())
    resp = await sse_response(request)
    events = _GenerateEvents(engine, req)
    async for _ in stream_updates(req, request):
        chunk = events.pending() + (b"data: [DONE]\n\n" if req.finished else b"")
        if chunk:
            await resp.write(chunk)
    return resp


class _GenerateEvents:
    """The cumulative /generate stream of one request: one event per engine step, all the steps since the last
    write sent together. Built from the request's ready-serialized text and ids; the meta_info of a running
    request differs between steps only in completion_tokens, so its JSON is made once and the count spliced in.
    Byte for byte what `dumps({"text": ..., "output_ids": ..., "meta_info": ...})` gives (tested)."""

    _COUNT = '"completion_tokens":'

    def __init__(self, engine: Engine, req: Request) -> None:
        self.engine = engine
        self.req = req
        self.sent_steps = 0
        self._running_meta: tuple[str, str] | None = None

    def _meta_json(self, tokens: int) -> str:
        req = self.req
        if req.finished and tokens == len(req.output_ids):
            return dumps(self.engine.meta_info(req))
        if self._running_meta is None:
            before, _, after = dumps(self.engine.meta_info(req, tokens=-1)).partition(self._COUNT + "-1")
            self._running_meta = (before + self._COUNT, after)
        before, after = self._running_meta
        return f"{before}{tokens}{after}"

    def pending(self) -> bytes:
        req = self.req
        steps = req.step_ends[self.sent_steps :]
        self.sent_steps += len(steps)
        return "".join(
            [
                f'data: {{"text":"{req.text[: step.text_chars]}","output_ids":[{req.ids_json[: step.ids_chars]}],'
                f'"meta_info":{self._meta_json(step.tokens)}}}\n\n'
                for step in steps
            ]
        ).encode()


def build_app(state: ServerState) -> web.Application:
    app = web.Application(middlewares=[_not_found_as_json], client_max_size=64 * 1024 * 1024)
    app[STATE] = state
    app.on_response_prepare.append(_on_prepare)
    r = app.router
    for path in ("/health", "/health_generate"):
        r.add_get(path, health)
    new = state.version.new_info_endpoints  # /model_info and /server_info from 0.5.6
    for path in ("/model_info", "/get_model_info") if new else ("/get_model_info",):
        r.add_get(path, model_info)
    for path in ("/server_info", "/get_server_info") if new else ("/get_server_info",):
        r.add_get(path, server_info)
    if state.version.ready_endpoint:
        r.add_get("/ready", ready)
    r.add_get("/v1/models", models)
    r.add_get("/v1/models/{model}", model)
    r.add_post("/generate", generate)
    r.add_post("/v1/completions", openai)
    r.add_post("/v1/chat/completions", openai)
    r.add_route("GET", "/flush_cache", flush_cache)
    r.add_route("POST", "/flush_cache", flush_cache)
    r.add_get("/metrics", metrics)
    for method in ("GET", "POST"):  # both, as SGLang's api_route does
        r.add_route(method, "/start_profile", start_profile)
        r.add_route(method, "/stop_profile", stop_profile)
    return app
