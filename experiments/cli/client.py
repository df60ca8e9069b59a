"""The JSON API over HTTP: one httpx client with the Bearer token, and one error type whose message says what the
server said (401, 403 with the role it needs, 422 with each field's errors), never the token."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from .credentials import Credentials, check_transport

TIMEOUT_S = 30.0
MAX_MESSAGE = 2000  # a server's error text shown in a terminal or a CI log, bounded


# Tests hand the client an in-process transport (httpx.WSGITransport over Django); None: the network.
DEFAULT_TRANSPORT: httpx.BaseTransport | None = None


class ApiError(Exception):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Api:
    def __init__(
        self, credentials: Credentials, *, timeout: float = TIMEOUT_S, transport: httpx.BaseTransport | None = None
    ) -> None:
        # The one place the token is sent: whichever way the credentials were made, plain http goes to this machine
        # only (credentials.check_transport), checked before any request.
        check_transport(credentials.url)
        self.url = credentials.url
        self._http = httpx.Client(
            base_url=credentials.url,
            headers={"Authorization": f"Bearer {credentials.token}", "Accept": "application/json"},
            timeout=timeout,
            follow_redirects=False,  # a redirect means a wrong URL (a login page): say so, send the token nowhere
            transport=transport or DEFAULT_TRANSPORT,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def page_url(self, path: str) -> str:
        """An absolute link to a page the API named by its path (`url` fields)."""
        return self.url + path if path.startswith("/") else path

    def get(self, path: str, **params: Any) -> Any:
        return self._json(self._send("GET", path, params=params))

    def post(self, path: str, body: Any = None) -> Any:
        return self._json(self._send("POST", path, json=body if body is not None else {}))

    def get_text(self, path: str) -> str:
        return self._send("GET", path).text

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, "/api" + path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(f"could not reach {self.url}: {type(exc).__name__}: {exc}"[:MAX_MESSAGE]) from None
        if response.is_redirect:
            where = response.headers.get("location", "")[:200]
            raise ApiError(f"{self.url} answered with a redirect to {where!r}: is this specdash's URL?", 0)
        if response.status_code >= 400:
            raise ApiError(_error_message(response), response.status_code)
        return response

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise ApiError(f"the server answered {response.status_code} with something other than JSON") from None


def segment(value: str | int) -> str:
    """A path segment from user input (an id), quoted so it cannot reach another endpoint."""
    return quote(str(value), safe="")


def _error_message(response: httpx.Response) -> str:
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    detail = body.get("detail") if isinstance(body, dict) else None
    if status == 401:
        text = "the token was refused (401): log in again with a valid token (`specdash login URL`)"
    elif isinstance(detail, str):
        text = f"{detail} ({status})"
    elif isinstance(detail, list):  # django-ninja's own validation of the body's types
        text = f"invalid request ({status}): " + "; ".join(_ninja_error(item) for item in detail)
    else:
        text = f"the server answered {status} {response.reason_phrase}"
    errors = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errors, dict):
        lines = [f"  {field}: {' '.join(map(str, messages)) if isinstance(messages, list) else messages}"
                 for field, messages in errors.items()]  # fmt: skip
        text += "\n" + "\n".join(lines)
    return text[:MAX_MESSAGE]


def _ninja_error(item: Any) -> str:
    if not isinstance(item, dict):
        return str(item)
    where = ".".join(str(p) for p in item.get("loc", []) if p != "body")
    return f"{where}: {item.get('msg', '')}"
