"""Prompt sets: list them, and upload one as text (the same checks as the page's upload)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Status

from experiments import serializers
from experiments.formats.prompt_sampling import MAX_UPLOAD_BYTES, PromptSetError

from ..actions.audit import Actor
from ..actions.prompts import PublishRefused, do_create_prompt_set
from ..forms import PromptSetUploadForm
from ..models import PromptSet
from .base import api, require
from .bodies import PromptSetIn
from .refusals import documented, refused, responses


@api.get("/prompt-sets")
def list_prompt_sets(request: HttpRequest):
    require(request, "experiments.view_promptset")
    return [serializers.prompt_set_json(s) for s in PromptSet.objects.defer("conversations")]


@api.post("/prompt-sets", response=responses(201, 400), openapi_extra=documented(400))
def create_prompt_set(request: HttpRequest, body: PromptSetIn):
    """`{"name": ..., "content": "<the JSONL or JSON file's text>"}`; 400 when the text is not a prompt set the
    upload reads (the answer says the line and why)."""
    require(request, "experiments.add_promptset")
    payload = body.model_dump()
    content = payload.get("content")
    errors: dict[str, list[str]] = {}
    name = ""
    try:
        name = str(PromptSetUploadForm.base_fields["name"].clean(payload.get("name")))
    except Exception as exc:  # a ValidationError, or a non-string name
        errors["name"] = list(getattr(exc, "messages", [str(exc)]))
    if not isinstance(content, str):
        errors["content"] = ["The file's text is required."]
    elif len(content) > MAX_UPLOAD_BYTES:
        errors["content"] = [f"At most {MAX_UPLOAD_BYTES} bytes are accepted."]
    if not errors:
        assert isinstance(content, str)
        try:
            prompt_set = do_create_prompt_set(Actor.of(request), name, content.encode())
        except PromptSetError as exc:
            # No schema states a file's format: the body's text is unreadable, as a body that is not JSON is.
            return refused("invalid prompt set", {"content": [str(exc)]}, 400)
        except PublishRefused as exc:
            return Status(403, {"detail": str(exc)})
        else:
            return Status(201, serializers.prompt_set_json(prompt_set))
    return Status(422, {"detail": "invalid prompt set", "errors": errors})
