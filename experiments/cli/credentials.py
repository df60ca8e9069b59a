"""Where the client finds its server and token: `SPECDASH_URL` / `SPECDASH_TOKEN`, else the credentials file that
`specdash login` wrote (`$XDG_CONFIG_HOME/specdash/credentials`, default `~/.config`), readable by its owner only.

A file that others can read is refused rather than used (as ssh refuses a private key): the token in it is as
good as the user's password for the API. For the same reason a plain `http://` URL is refused unless it names this
machine (a loopback address or `localhost`): anywhere else the token would cross the network readable by anyone on
the path. SPECDASH_ALLOW_HTTP=1 lifts that for a network the user trusts (a private lab, an SSH tunnel's far end)."""

from __future__ import annotations

import ipaddress
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

FILE_MODE = 0o600
DIR_MODE = 0o700
MAX_TOKEN_LENGTH = 200
ALLOW_HTTP = "SPECDASH_ALLOW_HTTP"


class CredentialsError(Exception):
    pass


@dataclass(frozen=True)
class Credentials:
    url: str
    token: str
    source: str  # "environment" or the file's path, for messages


def config_dir(environ: os._Environ[str] | dict[str, str] = os.environ) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or ""
    # The XDG spec: a relative value is invalid and is ignored.
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "specdash"


def credentials_path(environ: os._Environ[str] | dict[str, str] = os.environ) -> Path:
    return config_dir(environ) / "credentials"


def normalize_url(url: str, environ: os._Environ[str] | dict[str, str] = os.environ) -> str:
    """The server's base URL: https (or http to this machine), a host, no credentials, query or fragment; without a
    trailing slash."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CredentialsError(f"not an http(s) URL: {url!r}")
    if parts.username or parts.password:
        raise CredentialsError("the URL must not carry a user or password (the token is the credential)")
    if parts.query or parts.fragment:
        raise CredentialsError("the URL must not carry a query or fragment")
    check_transport(url, environ)
    return url.rstrip("/")


def check_transport(url: str, environ: os._Environ[str] | dict[str, str] = os.environ) -> None:
    """Refuse to send the token over plain http to anything but this machine, unless ALLOW_HTTP is "1"."""
    parts = urlsplit(url)
    if parts.scheme == "https" or is_loopback(parts.hostname or ""):
        return
    if parts.scheme == "http" and environ.get(ALLOW_HTTP) == "1":
        return
    host = (parts.hostname or "")[:100]
    raise CredentialsError(
        f"refusing to send the API token over plain http to {host!r}: anyone on the network path could read it. "
        f"Use the server's https:// URL (http:// is only for this machine: localhost, 127.0.0.1, [::1]), or set "
        f"{ALLOW_HTTP}=1 for a network you trust."
    )


def is_loopback(host: str) -> bool:
    """This machine: `localhost` or a loopback address (127.0.0.0/8, ::1); nothing that a resolver could send
    elsewhere (`localhost.example.com`, `127.1`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_token(token: str) -> str:
    token = token.strip()
    if not token or len(token) > MAX_TOKEN_LENGTH or not token.isascii() or not token.isprintable() or " " in token:
        raise CredentialsError("that does not look like a specdash API token")
    return token


def load(environ: os._Environ[str] | dict[str, str] = os.environ) -> Credentials:
    url, token = environ.get("SPECDASH_URL", ""), environ.get("SPECDASH_TOKEN", "")
    if url or token:
        if not (url and token):
            missing = "SPECDASH_TOKEN" if url else "SPECDASH_URL"
            raise CredentialsError(f"SPECDASH_URL and SPECDASH_TOKEN go together: {missing} is not set")
        return Credentials(normalize_url(url, environ), check_token(token), "environment")
    path = credentials_path(environ)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise CredentialsError(
            "not logged in: run `specdash login URL`, or set SPECDASH_URL and SPECDASH_TOKEN"
        ) from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialsError(
            f"{path} is readable by others (mode {stat.S_IMODE(info.st_mode):o}): run `chmod 600 {path}` "
            "or log in again"
        )
    try:
        data = json.loads(path.read_text())
        stored = Credentials(str(data["url"]), check_token(data["token"]), str(path))
    except (ValueError, KeyError, TypeError) as exc:
        raise CredentialsError(f"{path} is not a credentials file specdash wrote ({exc}): log in again") from None
    # Outside the try: a URL refused for its transport says so, not that the file is not specdash's.
    return Credentials(normalize_url(stored.url, environ), stored.token, stored.source)


def save(url: str, token: str, environ: os._Environ[str] | dict[str, str] = os.environ) -> Path:
    """Write the credentials file owner-only: the directory 0700, the file created 0600 and renamed into place,
    so no moment exists where another user could read the token."""
    path = credentials_path(environ)
    path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path.parent, DIR_MODE)  # one that existed before with looser permissions
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".credentials-")
    try:
        os.fchmod(descriptor, FILE_MODE)
        with os.fdopen(descriptor, "w") as file:
            json.dump({"url": normalize_url(url, environ), "token": check_token(token)}, file)
            file.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
