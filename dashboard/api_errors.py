"""Under /api/, every 4xx is a JSON object, also those that no API handler made.

The API's own errors are JSON already (django-ninja). A few come from the layers around it and would be HTML or
plain text: a path no route matches (an unknown operation, an id holding a slash), a method an operation does not
take (405), a body over DATA_UPLOAD_MAX_MEMORY_SIZE (400). A script reading the API gets `{"detail": ...}` for
those too, with the same status (and the same Allow header for a 405).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase, JsonResponse

API_PREFIX = "/api/"


class JsonApiErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if (
            request.path.startswith(API_PREFIX)
            and 400 <= response.status_code < 500
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            replaced = JsonResponse({"detail": _detail(request, response)}, status=response.status_code)
            if response.has_header("Allow"):
                replaced["Allow"] = response["Allow"]
            return replaced
        return response


def _detail(request: HttpRequest, response: HttpResponseBase) -> str:
    """What went wrong, in words: a body over the limit says so and names the limit (a prompt set's text is the
    one body that grows that large)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    length = request.META.get("CONTENT_LENGTH") or ""
    if response.status_code == 400 and limit is not None and length.isdigit() and int(length) > limit:
        return f"The request body has {int(length):,} bytes; the API accepts at most {limit:,}."
    return response.reason_phrase
