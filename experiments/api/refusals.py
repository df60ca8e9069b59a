"""The status of a refused request, and the schema's word for each: a schema states most of what the forms check
(bodies.py), so what it calls valid is refused only for a rule no schema can state, with a status that says which.

- 403: the launch policy does not let this user set a flag or variable (an admin can allow it for a host).
- 404: an id, a name or a model path names nothing (no such row; no model under the host's models root).
- 409: the request contradicts itself or what is stored: a name taken, fields that must agree (prompts enough for
  the concurrency, topk 1 with steps + 1 draft tokens), a flag the host's SGLang lacks, a study still running.
- 429: over a quota (launches queued at once, GPU-hours a day).
- 422: a field breaks a rule the schema states; the answer names it.
The forms tag each refusal of the first kinds with a ValidationError code (forms/values.py: `NOT_ALLOWED`,
`NOT_FOUND`, `CONFLICT`); any other error means the request broke the schema, and 422 it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django import forms
from ninja import Status

from ..forms.values import CONFLICT, ECHO, NOT_ALLOWED, NOT_FOUND

# "unique": Django's own code for a value another row holds (a host's name).
STATUS_OF_CODE = {NOT_ALLOWED: 403, NOT_FOUND: 404, CONFLICT: 409, "unique": 409}

DESCRIPTIONS = {
    400: "The body is not JSON, is larger than the API accepts, or a file's text in it is not in a format the API "
    "reads (the answer names the field, the line and why)",
    403: "The user's role, the object's owner or the launch policy does not allow this (an admin can allow a flag "
    "or variable for a host)",
    404: "An id, a name or a model path (in the path, the query or the body) names nothing; the answer names the field",
    409: "The request contradicts itself or what is stored (a name taken, fields that must agree, a flag the host's "
    "SGLang lacks, a state that does not allow it); the answer names the field",
    429: "Over a quota (launches queued at once, GPU-hours a day); the answer says the limit and who can raise it",
}
_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}


def documented(*statuses: int) -> dict[str, Any]:
    """An operation's `openapi_extra` documenting the refusal `statuses` it may answer, in the `Error` shape."""
    return {"responses": {s: {"description": DESCRIPTIONS[s], "content": _ERROR} for s in statuses}}


def responses(ok: int, *statuses: int) -> dict[int, Any]:
    """An operation's `response`: its answer, and the refusals it returns with their errors (any JSON object): a
    form's (`status_of`) and `statuses`."""
    return {ok: dict, **{status: dict for status in (403, 404, 422, *statuses)}}


def status_of(forms_: Iterable[forms.BaseForm]) -> int:
    """The status of forms that refused: 422 if any error breaks a stated rule, else the first of 403, 404, 409."""
    statuses = {
        STATUS_OF_CODE.get(error.code or "", 422)
        for form in forms_
        for errors in form.errors.as_data().values()
        for error in errors
        if error.code != ECHO
    }
    if not statuses or 422 in statuses:
        return 422
    return min(statuses)


def refused(detail: str, errors: dict[str, list[str]], status: int = 422) -> Status:
    return Status(status, {"detail": detail, "errors": errors})
