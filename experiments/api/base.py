"""What every part of the JSON API shares: the API object, token authentication, permission checks, and reading
configs, profiles and hosts given inline or by id."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI, Schema
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser
from ninja.security import HttpBearer, django_auth

from experiments.formats import bounded_json

from ..actions.quotas import QuotaExceeded
from ..forms import (
    CONTROL_CHARS,
    BenchmarkProfileForm,
    apply_profile_defaults,
    config_form_data,
    profile_form_data,
)
from ..models import ApiToken, BenchmarkProfile, Experiment, Host, PromptSet, ServerConfig


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        api_token = ApiToken.objects.matching(token).select_related("user").first()
        if api_token is None or not api_token.user.is_active:
            return None
        api_token.touch()
        request.user = api_token.user
        # The audit log names the token a change came through.
        request.api_token = api_token  # type: ignore[attr-defined]
        return api_token.user


def _viewers_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The schema and the docs page, like every endpoint: 401 without a session or token, 403 below the viewer
    role (the schema maps every operation and field an attacker would probe)."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user if request.user.is_authenticated else BearerToken()(request)
        if not user:
            return JsonResponse({"detail": "Unauthorized"}, status=401)
        if not user.has_perm(DOCS_PERMISSION):
            return JsonResponse({"detail": f"Your role does not allow this (it needs {DOCS_PERMISSION})."}, status=403)
        return view(request, *args, **kwargs)

    return wrapper


DOCS_PERMISSION = "experiments.view_experiment"  # every role from viewer up holds it

# CONTROL_CHARS refused, as a JSON Schema pattern: what a query parameter's schema says of the text it takes.
TEXT_WITHOUT_CONTROLS = f"^[^{CONTROL_CHARS.pattern[1:-1]}]*$"

# The error every operation may answer, as the API writes it: {"detail": text} from a handler, the auth layer or the
# middleware around the API (dashboard/api_errors.py); {"detail": [{"loc", "msg", ...}]} from django-ninja's own
# validation of parameters; {"detail": text, "errors": {field: [text]}} from the forms.
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "detail": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]},
        "errors": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
    },
    "required": ["detail"],
}
_ERRORS = {
    "400": "The body is not JSON, or is larger than the API accepts",
    "401": "No valid token or session",
    "403": "The user's role (or ownership of the object) does not allow this",
    "404": "No such object: an id in the path, or one in the body or query (the answer names the field)",
    "422": "A parameter or a field of the body is invalid; the answer names it",
}


def _operation_errors(operation: dict[str, Any]) -> list[str]:
    """The error statuses an operation can answer: every operation needs a login and a role; one with a body may get
    one it cannot parse; one with path parameters may name no row; one with parameters or a body may get bad ones."""
    locations = {parameter.get("in") for parameter in operation.get("parameters", [])}
    has_body = "requestBody" in operation
    return [
        "401",
        "403",
        *(["400"] if has_body else []),
        *(["404"] if "path" in locations or has_body else []),
        *(["422"] if locations or has_body else []),
    ]


class SpecdashApi(NinjaAPI):
    def get_openapi_schema(self, **kwargs: Any) -> Any:
        """The schema with the errors each operation answers documented (an undocumented status is a surprise to
        every client generated from it), unless the operation declares its own shape for that status."""
        schema = super().get_openapi_schema(**kwargs)
        schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
        error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        for methods in schema["paths"].values():
            for operation in methods.values():
                responses = operation.setdefault("responses", {})
                declared = {str(status) for status in responses}  # django-ninja keys them by int
                for status in _operation_errors(operation):
                    if status not in declared:
                        responses[status] = {"description": _ERRORS[status], "content": error}
        return schema


class BoundedJsonParser(Parser):
    """Every JSON body, read through bounded_json: one nested past its depth, holding a lone surrogate or NaN never
    reaches a schema, a form or the database (`_unreadable_body` answers it)."""

    def parse_body(self, request: HttpRequest) -> Any:
        return bounded_json.loads(request.body)


api = SpecdashApi(
    title="specdash API",
    parser=BoundedJsonParser(),
    version="1",
    auth=[BearerToken(), django_auth],
    urls_namespace="api",
    docs_decorator=_viewers_only,
)

# The parts of a location that name no field: a body's parameter, and the branch of a union pydantic tried.
_NOT_A_FIELD = re.compile(r"[A-Z]\w*In|constrained-int|int|str|bool|float|(list|dict|function-\w+)\[.*")


def _may_change_anything(request: HttpRequest) -> bool:
    # Members and up submit (add_experiment); only admins may register hosts. Viewers and outsiders change nothing.
    return request.user.has_perm("experiments.add_experiment") or request.user.has_perm("experiments.add_host")


@api.exception_handler(NinjaValidationError)
def _schema_refusal(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    """A request the schema refuses: django-ninja's `detail`, and the same under `errors` by the API's field names
    (`candidates.0.tp_size`), as the forms answer. A user whose role may change nothing hears 403 whatever the body
    (the handler, which checks the role, never runs on a body the schema refuses)."""
    if request.method != "GET" and not _may_change_anything(request):
        return api.create_response(request, {"detail": "Your role does not allow this."}, status=403)
    errors: dict[str, list[str]] = {}
    for item in exc.errors:
        where, *path = [str(part) for part in item.get("loc", [])] or ["body"]
        names = [part for part in (path[1:] if where == "body" else path) if not _NOT_A_FIELD.fullmatch(part)]
        errors.setdefault(".".join(names) or where, []).append(str(item.get("msg", "invalid")))
    return api.create_response(request, {"detail": exc.errors, "errors": errors}, status=422)


@api.exception_handler(QuotaExceeded)
def _over_quota(request: HttpRequest, exc: QuotaExceeded) -> HttpResponse:
    """Past a quota, wherever an operation raised it: the one gate is where runs are queued (actions/quotas.py), so
    every operation that can queue answers this, in one shape: 429, the refusal naming the limit, what was asked
    and who can raise it."""
    return api.create_response(request, {"detail": "over quota", "errors": {"quota": [str(exc)]}}, status=429)


@api.exception_handler(HttpError)
def _unreadable_body(request: HttpRequest, exc: HttpError) -> HttpResponse:
    """django-ninja's answer to an HttpError ({"detail": text}), except for a body bounded_json refused: django-ninja
    says only "Cannot parse request body", this names where and why (422 naming the field, 400 for the whole body)."""
    refused = exc.__cause__
    if not isinstance(refused, bounded_json.JsonRefused):
        return api.create_response(request, {"detail": str(exc)}, status=exc.status_code)
    if request.method != "GET" and not _may_change_anything(request):
        return api.create_response(request, {"detail": "Your role does not allow this."}, status=403)
    if refused.field:
        errors = {refused.field: [f"{refused.reason[:1].upper()}{refused.reason[1:]}."]}
        return api.create_response(request, {"detail": "invalid body", "errors": errors}, status=422)
    return api.create_response(request, {"detail": f"The request body is refused: {refused.reason}."}, status=400)


def require(request: HttpRequest, perm: str) -> None:
    """403 unless the user's role grants `perm` (see roles.py)."""
    if not request.user.has_perm(perm):
        raise HttpError(403, f"Your role does not allow this (it needs {perm}).")


def require_manage(request: HttpRequest, experiment: Experiment) -> None:
    if not experiment.can_be_managed_by(request.user):
        raise HttpError(403, "Only the experiment's owner or a maintainer may do this.")


def config_data(value: Any, path: str) -> dict[str, Any]:
    """A config given inline (a body's ConfigIn, or its plain object) or by id, as the config form's data; 404 naming
    `path` for an id that names no row."""
    if isinstance(value, Schema):
        value = value.form_payload()  # type: ignore[attr-defined]
    if isinstance(value, int):
        config = ServerConfig.objects.filter(pk=value).first()
        if config is None:
            raise HttpError(404, f"{path}: no config with id {value}")
        return config_form_data({**config.launch_spec(), "name": config.name})
    return config_form_data(value)


def profile_data(value: Any) -> dict[str, Any]:
    """A profile given inline (a body's ProfileIn, or its plain object) or by id, as the profile form's data; 404 for
    an id (its own, or its prompt set's) that names no row."""
    if isinstance(value, Schema):
        value = value.form_payload()  # type: ignore[attr-defined]
    if isinstance(value, int):
        profile = BenchmarkProfile.objects.filter(pk=value).first()
        if profile is None:
            raise HttpError(404, f"profile: no profile with id {value}")
        value = {f: getattr(profile, f) for f in (*BenchmarkProfileForm.Meta.fields, "concurrency")}
    else:
        prompt_set = value.get("prompt_set")
        if isinstance(prompt_set, int) and not PromptSet.objects.filter(pk=prompt_set).exists():
            raise HttpError(404, f"profile.prompt_set: no prompt set with id {prompt_set}")
    return profile_form_data(apply_profile_defaults(value))


def host_name(value: str | int) -> str:
    """The name of a host given by name or id; 404 when it names none."""
    # A host's name is a slug: a text PostgreSQL cannot even hold (a NUL) names none, and is never sent to it.
    named_none = isinstance(value, str) and "\x00" in value
    host = (
        None
        if named_none
        else Host.objects.filter(**({"pk": value} if isinstance(value, int) else {"name": value})).first()
    )
    if host is None:
        named = f"with id {value}" if isinstance(value, int) else f"named {value[:80]!r}"
        raise HttpError(404, f"host: no host {named}")
    return host.name


def api_user(request: HttpRequest):
    """The authenticated user (every endpoint requires auth; the type checker cannot know that)."""
    assert request.user.is_authenticated
    return request.user
