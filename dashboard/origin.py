"""The websocket origin check: a handshake is accepted only from a page of this very site.

Channels' AllowedHostsOriginValidator compares only the Origin's host, so a page served by any other port or
scheme of an allowed host (another service on the same machine, plain http beside https) could open a
websocket with the user's cookies, which are not scoped by port. Here the Origin must equal, in scheme, host and
port, the origin the handshake was made to (its Host header, the host one of ALLOWED_HOSTS; https when the
connection or, per SECURE_PROXY_SSL_HEADER, the proxy in front says so), or one of CSRF_TRUSTED_ORIGINS: the
rule Django's CSRF check applies to form posts.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]


class SiteOriginValidator:
    """ASGI middleware for the websocket router: denies a handshake whose Origin is not one of the site's."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not is_allowed_origin(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)


def is_allowed_origin(scope: dict[str, Any]) -> bool:
    headers = _headers(scope)
    origin = _parse_origin(headers.get("origin", ""))
    if origin is None:
        return False  # browsers always send one; "null" (a sandboxed or file page) is no site's
    if any(_matches_trusted(origin, trusted) for trusted in settings.CSRF_TRUSTED_ORIGINS):
        return True
    scheme = "https" if _is_secure(scope, headers) else "http"
    host = headers.get("host") or _server_host(scope)
    if host is None:
        # No Host header and no server address: never a browser's handshake (HTTP/1.1 requires Host). Only
        # an allowed host at its scheme's default port can then be this site.
        return origin[0] == scheme and origin[2] == DEFAULT_PORTS[scheme] and _is_allowed_host(origin[1])
    domain, port = split_domain_port(host)
    if not domain or not _is_allowed_host(domain):
        return False
    own = (scheme, domain.strip("[]"), int(port) if port else DEFAULT_PORTS[scheme])
    return origin == own


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    # Header names arrive lower-cased (ASGI); a repeated header counts only once, as its first value.
    found: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        found.setdefault(name.decode("latin1"), value.decode("latin1"))
    return found


def _parse_origin(value: str) -> Origin | None:
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def _matches_trusted(origin: Origin, trusted: str) -> bool:
    """`trusted` is a CSRF_TRUSTED_ORIGINS entry: scheme://host[:port], the host possibly `*.domain`."""
    wildcard = "://*." in trusted
    parsed = _parse_origin(trusted.replace("://*.", "://", 1))
    if parsed is None:
        return False
    scheme, host, port = parsed
    if (origin[0], origin[2]) != (scheme, port):
        return False
    return is_same_domain(origin[1], f".{host}") if wildcard else origin[1] == host


def _is_secure(scope: dict[str, Any], headers: dict[str, str]) -> bool:
    if scope.get("scheme") == "wss":
        return True
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        name, secure_value = proxy_header
        name = name.removeprefix("HTTP_").replace("_", "-").lower()
        return headers.get(name, "").split(",")[0].strip() == secure_value
    return False


def _server_host(scope: dict[str, Any]) -> str | None:
    server = scope.get("server")
    if not server or server[1] is None:
        return None
    return f"{server[0]}:{server[1]}"


def _is_allowed_host(domain: str) -> bool:
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]  # what Django itself allows then
    return validate_host(domain, allowed)
