"""The OpenAI-compatible endpoints (/v1/completions, /v1/chat/completions), apart from the native ones in server.py."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from simhost.engine import word_ids
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


def _messages_ids(state: ServerState, messages: Any) -> list[int]:
    words: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        words += ["<|im_start|>", str(message.get("role", "user")), *str(content or "").split(), "<|im_end|>"]
    return word_ids(words, int(state.target.get("vocab_size", 32000))) or [0]


async def openai(request: web.Request) -> web.StreamResponse:
    """/v1/completions and /v1/chat/completions."""
    state = request.app[STATE]
    chat = request.path.endswith("/chat/completions")
    try:
        body = await request.json()
    except ValueError:
        return error_response("Invalid JSON body")
    if chat:
        ids: list[int] | None = _messages_ids(state, body.get("messages"))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        ids = prompt_ids(
            state, prompt if isinstance(prompt, str) else None, prompt if isinstance(prompt, list) else None
        )
    if ids is None:
        return error_response("prompt is required")
    max_new = body.get("max_completion_tokens") or body.get("max_tokens") or (None if chat else 16)
    if max_new is None:
        max_new = state.context_len - len(ids)
    text = None if chat or not isinstance(body.get("prompt"), str) else body["prompt"]
    started = await start_request(state, ids, int(max_new), False, text)
    if isinstance(started, web.Response):
        return started
    req = started
    rid = req.rid
    model_name = body.get("model") or state.args.served_model_name
    obj = "chat.completion" if chat else "text_completion"
    head = {
        "id": rid,
        "object": obj + (".chunk" if body.get("stream") and chat else ""),
        "created": int(time.time()),
        "model": model_name,
    }

    def sglext() -> dict[str, Any]:
        """`sglext.spec_tokens_details` once the request has finished, when the body asked for it (0.5.23)."""
        details = state.engine.spec_tokens_details(req) if body.get("return_spec_tokens_details") is True else None
        return {} if details is None else {"sglext": {"spec_tokens_details": details}}

    def usage(full: bool) -> dict[str, Any]:
        u: dict[str, Any] = {
            "prompt_tokens": len(req.input_ids),  # with a template's ids, where the server added some
            "total_tokens": len(req.input_ids) + len(req.output_ids),
            "completion_tokens": len(req.output_ids),
        }
        if full:  # chat dumps nulls; the completions usage chunk is dumped with exclude_none
            u["prompt_tokens_details"] = None
        u["reasoning_tokens"] = 0
        return u

    if not body.get("stream"):
        async for _ in stream_updates(req, request):
            pass
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": req.text.lstrip(),
                    "reasoning_content": None,
                    "tool_calls": None,
                },
            }
        else:
            choice = {"index": 0, "text": req.text}
        choice |= {"logprobs": None, "finish_reason": "length", "matched_stop": None}
        return json_response({**head, "choices": [choice], "usage": usage(True), "metadata": None, **sglext()})

    resp = await sse_response(request)

    def event(choices: list[dict[str, Any]], use: dict[str, Any] | None = None, last: bool = False) -> str:
        # The chunk that finishes the choice carries the request's spec details, when asked for.
        return f"data: {dumps({**head, 'choices': choices, 'usage': use, **(sglext() if last else {})})}\n\n"

    async def send(choices: list[dict[str, Any]], use: dict[str, Any] | None = None, last: bool = False) -> None:
        await resp.write(event(choices, use, last).encode())

    def delta(text: str | None, role: str | None = None) -> dict[str, Any]:
        return {"role": role, "content": text, "reasoning_content": None, "tool_calls": None}

    if chat:
        await send(
            [
                {
                    "index": 0,
                    "delta": delta("", "assistant"),
                    "logprobs": None,
                    "finish_reason": None,
                    "matched_stop": None,
                }
            ]
        )
    sent_steps, sent_chars = 0, 0
    async for _ in stream_updates(req, request):
        pieces = []
        for step in req.step_ends[sent_steps:]:  # one delta per engine step, however many steps passed
            piece, sent_chars = req.text[sent_chars : step.text_chars], step.text_chars
            last = req.finished and step.tokens == len(req.output_ids)
            final = "length" if last and not chat else None
            body_piece: dict[str, Any] = {"delta": delta(piece)} if chat else {"text": piece}
            pieces.append(
                event(
                    [{"index": 0, **body_piece, "logprobs": None, "finish_reason": final, "matched_stop": None}],
                    last=final is not None,
                )
            )
        sent_steps = len(req.step_ends)
        if pieces:
            await resp.write("".join(pieces).encode())
    if chat:
        await send(
            [
                {
                    "index": 0,
                    "delta": delta(None),
                    "logprobs": None,
                    "finish_reason": "length",
                    "matched_stop": None,
                }
            ],
            last=True,
        )
    if (body.get("stream_options") or {}).get("include_usage"):
        await send([], usage(chat))
    await resp.write(b"data: [DONE]\n\n")
    return resp
