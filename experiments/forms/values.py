"""Parsing and checking of the values users type: env assignments, extra launch args, concurrency lists."""

from __future__ import annotations

import re
import shlex
from typing import Any

from django.core.exceptions import ValidationError

from ..models import MANAGED_FLAGS

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Values that reach a remote shell are always quoted; control characters are refused outright because no
# legitimate path, flag or env value contains them and they make logs and commands unreadable.
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
MAX_CONCURRENCY = 1024


def no_control_chars(value: str, what: str) -> None:
    if CONTROL_CHARS.search(value):
        raise ValidationError(f"{what} must not contain control characters or newlines.")


def parse_env(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep:
            raise ValidationError(f"Line {number}: expected NAME=VALUE, got {line!r}.")
        if not ENV_NAME.match(name):
            raise ValidationError(f"Line {number}: {name!r} is not a valid environment variable name.")
        no_control_chars(value, f"The value of {name}")
        env[name] = value
    return env


def check_env(env: Any) -> dict[str, str]:
    """The JSON API's env object, held to the rules of the NAME=VALUE text the browser sends."""
    if not isinstance(env, dict):
        raise ValidationError("The environment must be an object of NAME -> value.")
    checked: dict[str, str] = {}
    for name, value in env.items():
        if not ENV_NAME.match(name):
            raise ValidationError(f"{name!r} is not a valid environment variable name.")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValidationError(f"The value of {name} must be a string.")
        no_control_chars(str(value), f"The value of {name}")
        checked[name] = str(value)
    return checked


def format_env(env: dict[str, str]) -> str:
    return "\n".join(f"{name}={value}" for name, value in env.items())


def parse_extra_args(text: str) -> list[str]:
    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise ValidationError(f"Could not split the extra arguments: {exc}.") from exc
    return check_extra_args(args)


def check_extra_args(args: Any) -> list[str]:
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise ValidationError('Extra arguments must be a list of strings, e.g. ["--mem-fraction-static", "0.85"].')
    for arg in args:
        no_control_chars(arg, "Extra arguments")
    if args and not args[0].startswith("-"):
        raise ValidationError(f"Extra arguments must start with a flag, not {args[0]!r}.")
    for arg in args:
        if not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        # argparse accepts unique prefixes, so `--tp` or `--speculative-num-st` would also override a field.
        clash = sorted(m for m in MANAGED_FLAGS if m == flag or m.startswith(flag))
        if clash:
            raise ValidationError(
                f"{flag} is set by the config's own fields ({', '.join(clash)}); use those fields instead."
            )
    return args


def parse_concurrency(text: str) -> list[int]:
    levels: set[int] = set()
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        try:
            level = int(part)
        except ValueError as exc:
            raise ValidationError(f"{part!r} is not a whole number.") from exc
        if not 1 <= level <= MAX_CONCURRENCY:
            raise ValidationError(f"Concurrency {level} is outside 1..{MAX_CONCURRENCY}.")
        levels.add(level)
    if not levels:
        raise ValidationError("Give at least one concurrency level.")
    return sorted(levels)
