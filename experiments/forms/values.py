"""Parsing and checking of the values users type: env assignments, extra launch args, concurrency lists.

The rules themselves (which names and flags, how long, how many) are `experiments.rules.launch_policy`'s, shared with
the worker that checks them again before a launch.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput, JSONString

from experiments.formats import bounded_json
from experiments.rules import launch_fields, launch_policy
from experiments.rules.launch_policy import CONTROL_CHARS, ENV_NAME

# What kind of rule a refusal is, as its ValidationError code, for the API to answer with the status that says so
# (api/refusals.py): no schema can state these, so a request the schema calls valid may still break one.
NOT_ALLOWED = "not_allowed"  # the launch policy: an admin can allow the flag or variable for a host
NOT_FOUND = "not_found"  # a model path that names nothing under the host's models root
CONFLICT = "conflict"  # fields that must agree, a name taken, a flag the host's SGLang lacks
ECHO = "echo"  # repeats another form's errors (the sweep's base): that form's codes decide

# More in flight than any single server batches (SGLang's running requests top out in the low thousands).
MAX_CONCURRENCY = 4096
MAX_CONCURRENCY_LEVELS = 32  # each level is a benchmark cell per pass: 32 is already hours of benchmarking
MAX_CANDIDATES = 50  # of one experiment, given and swept together


class BoundedJSONField(forms.JSONField):
    """A JSON box read through bounded_json, as every API body is: text nested past its depth, holding a lone
    surrogate or NaN is refused on the field (Django's own reading would raise a RecursionError, a 500, and store
    what no page can show)."""

    def to_python(self, value: Any) -> Any:
        if self.disabled or value in self.empty_values:
            return super().to_python(value)
        try:
            if isinstance(value, str) and not isinstance(value, JSONString):
                converted = bounded_json.loads(value)
                return JSONString(converted) if isinstance(converted, str) else converted
            problem = bounded_json.refusal(value)
            if problem is not None:
                raise problem
        except bounded_json.JsonRefused as exc:
            where = f" (at {exc.field})" if exc.field else ""
            raise ValidationError(f"This JSON is refused: {exc.reason}{where}.", code="invalid") from None
        except ValueError:
            raise ValidationError(self.error_messages["invalid"], code="invalid", params={"value": value}) from None
        return value

    def bound_data(self, data: Any, initial: Any) -> Any:
        """What the page shows again after an error: refused text as typed (Django would decode it again)."""
        if self.disabled or not isinstance(data, str):
            return initial if self.disabled else data
        try:
            return bounded_json.loads(data)
        except ValueError:
            return InvalidJSONInput(data)


def plain_errors(form: forms.BaseForm, path: str = "") -> dict[str, list[str]]:
    """A form's errors keyed by the API's field names (`env`, not `env_text`; `engine_options.X`, not the config
    form's `option_X`), under a dotted `path` prefix."""
    errors = {}
    for field, messages in form.errors.items():
        name = f"engine_options.{field.removeprefix('option_')}" if field.startswith("option_") else field
        key = f"{path}{name}" if field != "__all__" else (path.rstrip(".") or "__all__")
        errors[key.replace("_text", "")] = [str(m) for m in messages]
    return errors


def policy_error(problem: str) -> ValidationError:
    """A refusal of the launch policy: of a value's shape (the API's schema states it), or NOT_ALLOWED."""
    return ValidationError(f"{problem}.", code="invalid" if launch_policy.is_shape_refusal(problem) else NOT_ALLOWED)


def no_control_chars(value: str, what: str) -> None:
    if CONTROL_CHARS.search(value):
        raise ValidationError(f"{what} must not contain control characters or newlines.")


def _check_env_policy(env: dict[str, Any], extra_prefixes: Iterable[str]) -> None:
    problems = launch_policy.env_refusals(env, extra_prefixes)
    if problems:
        raise ValidationError([policy_error(problem) for problem in problems])


def parse_env(text: str, extra_prefixes: Iterable[str] = ()) -> dict[str, str]:
    """NAME=VALUE lines; every name must be allowed on the host (built-in prefixes plus `extra_prefixes`)."""
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
        env[name] = value
    _check_env_policy(env, extra_prefixes)
    return env


def check_env(env: Any, extra_prefixes: Iterable[str] = ()) -> dict[str, str]:
    """The JSON API's env object, held to the rules of the NAME=VALUE text the browser sends."""
    if not isinstance(env, dict):
        raise ValidationError("The environment must be an object of NAME -> value.")
    _check_env_policy(env, extra_prefixes)
    # A stored secret (a config given by id) stays a SecretValue: str() of it would be the mask.
    return {name: value if isinstance(value, str) else str(value) for name, value in env.items()}


def format_env(env: dict[str, str]) -> str:
    return "\n".join(f"{name}={value}" for name, value in env.items())


def parse_extra_args(text: str, extra_flags: Iterable[str] = (), engine: str = launch_fields.SGLANG) -> list[str]:
    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise ValidationError(f"Could not split the extra arguments: {exc}.") from exc
    return check_extra_args(args, extra_flags, engine)


def check_extra_args(args: Any, extra_flags: Iterable[str] = (), engine: str = launch_fields.SGLANG) -> list[str]:
    """`args` as given, if the launch policy lets them reach a host that allows `extra_flags` (`Host.extra_flags`)
    on `engine`'s server."""
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise ValidationError('Extra arguments must be a list of strings, e.g. ["--mem-fraction-static", "0.85"].')
    # argparse accepts unique prefixes, so `--tp` or `--speculative-num-st` would also override a field.
    problems = launch_policy.extra_args_refusals(args, launch_fields.managed_flags(engine), extra_flags, engine=engine)
    if problems:
        raise ValidationError([policy_error(problem) for problem in problems])
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
    if len(levels) > MAX_CONCURRENCY_LEVELS:
        raise ValidationError(f"At most {MAX_CONCURRENCY_LEVELS} concurrency levels.")
    return sorted(levels)
