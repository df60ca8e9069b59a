"""Secrets as a type: the one place that decides which environment values are secret and how they are shown. Pure
(no Django).

A value under a secret-looking name (HF_TOKEN, *PASSWORD, ...) is held as a `SecretValue`: a string whose text *is*
the mask, so every way of showing it (a template, an f-string, `json.dumps`, a CSV cell, an error message, a
schedule's note, a diff) shows the mask without knowing it is a secret. The value itself comes out only through
`reveal()`, which the few places that need it call by name: storing it (`models.secret_env.SecretEnvField`), the
config's content hash, and the launch, which hands it to the server on standard input, never on a command line.

So a new page, export or note that forgets about secrets still leaks nothing: forgetting fails closed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Values of such names are secrets: every member reads a shared config, so none of them may read these back.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|ACCESS_KEY|PRIVATE|AUTH", re.IGNORECASE)
MASK = "(hidden)"


def is_secret_name(name: object) -> bool:
    return bool(SECRET_NAME.search(str(name)))


class SecretValue(str):
    """A secret: reads, prints, compares and serializes as MASK; `reveal()` is the only way to its value."""

    _value: str

    def __new__(cls, value: object) -> SecretValue:
        obj = super().__new__(cls, MASK)
        obj._value = value.reveal() if isinstance(value, SecretValue) else str(value)
        return obj

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "SecretValue(" + MASK + ")"

    # Pickled (a Celery argument, a cache entry) it stays a secret with its value, not the mask's text.
    def __reduce__(self) -> tuple[Any, ...]:
        return (SecretValue, (self._value,))

    def __copy__(self) -> SecretValue:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> SecretValue:
        return self


def hide(name: object, value: Any) -> Any:
    """`value` as held under `name`: a SecretValue for a secret name (None stays None), else unchanged."""
    if value is None or isinstance(value, SecretValue) or not is_secret_name(name):
        return value
    return SecretValue(value)


def reveal(value: Any) -> Any:
    return value.reveal() if isinstance(value, SecretValue) else value


class HiddenEnv(dict[str, Any]):
    """An environment whose secret values are SecretValues, however they are put in (`env[name] = ...` included)."""

    def __init__(self, env: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.update(env or {})

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, hide(name, value))

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def setdefault(self, name: str, value: Any = None) -> Any:
        if name not in self:
            self[name] = value
        return self[name]

    def __or__(self, other: Any) -> HiddenEnv:  # type: ignore[override]
        return HiddenEnv({**self, **dict(other)})

    def __ior__(self, other: Any) -> HiddenEnv:  # type: ignore[override]
        self.update(other)
        return self


def hidden(env: Mapping[str, Any] | None) -> HiddenEnv:
    return HiddenEnv(env)


def revealed(env: Mapping[str, Any] | None) -> dict[str, Any]:
    """`env` with every secret's value: for storing it and for the launch, nothing that shows it."""
    return {str(name): reveal(value) for name, value in (env or {}).items()}


def shown(env: Mapping[str, Any] | None) -> dict[str, str]:
    """`env` as any page, export or note shows it: every value a string, every secret the mask."""
    return {str(name): MASK if is_secret_name(name) else str(value) for name, value in (env or {}).items()}


def public(env: Mapping[str, Any] | None) -> dict[str, Any]:
    """The variables of `env` that are not secrets (what may go on a command line)."""
    return {name: value for name, value in (env or {}).items() if not is_secret_name(name)}


def with_stored_secrets(env: Mapping[str, Any], stored: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`env` as a form submitted it, each secret shown as the mask taking back its value from `stored` (the same
    name only); and the names whose mask has no stored value (the user must type it: the mask is not a value)."""
    restored, missing = dict(env), []
    for name, value in env.items():
        if isinstance(value, SecretValue) or value != MASK or not is_secret_name(name):
            continue  # a stored secret handed over by the server itself is its own value
        if name in stored:
            restored[name] = stored[name]
        else:
            missing.append(name)
    return restored, missing


def secret_part(env: Mapping[str, Any] | None) -> dict[str, str]:
    """The secrets of `env` with their values (what the launch passes on standard input)."""
    return {str(name): str(reveal(value)) for name, value in (env or {}).items() if is_secret_name(name)}
