"""The value rules of the launch allowlist: what the value of one allowed SGLang flag or environment variable may be
(a whole number in a range, a decimal in a range, one of a few words, a switch that takes none, a list shaped by a
pattern, a secret). Pure (no Django). Every rule answers a refusal in words, or None when the value is allowed.

Numbers are read in the plain ASCII spelling only: Python's int() and float() also take "1_000", "١٢", " 8 ", "inf"
and "nan", and the value the check read must be the value the server reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_INT = re.compile(r"-?[0-9]{1,15}", re.ASCII)
_FLOAT = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?([eE][-+]?[0-9]{1,3})?", re.ASCII)


class Rule:
    """A value rule. `takes_value` False: a switch (a flag spelled alone, `--enable-metrics`)."""

    takes_value = True
    text = ""  # what it allows, in words, for the refusal messages

    def refusal(self, name: str, value: str) -> str | None:
        raise NotImplementedError


@dataclass(frozen=True)
class Switch(Rule):
    takes_value = False
    text = "no value"

    def refusal(self, name: str, value: str) -> str | None:
        return f"{name} is a switch and takes no value"


@dataclass(frozen=True)
class Int(Rule):
    low: int
    high: int

    @property
    def text(self) -> str:  # type: ignore[override]
        return f"a whole number from {self.low} to {self.high}"

    def refusal(self, name: str, value: str) -> str | None:
        if _INT.fullmatch(value) and self.low <= int(value) <= self.high:
            return None
        return f"{name} takes {self.text}, not {value[:40]!r}"


@dataclass(frozen=True)
class Float(Rule):
    low: float
    high: float

    @property
    def text(self) -> str:  # type: ignore[override]
        return f"a number from {self.low:g} to {self.high:g}"

    def refusal(self, name: str, value: str) -> str | None:
        if _FLOAT.fullmatch(value) and self.low <= float(value) <= self.high:
            return None
        return f"{name} takes {self.text}, not {value[:40]!r}"


@dataclass(frozen=True)
class Choice(Rule):
    choices: tuple[str, ...]
    ignore_case: bool = False

    @property
    def text(self) -> str:  # type: ignore[override]
        return "one of " + ", ".join(self.choices)

    def refusal(self, name: str, value: str) -> str | None:
        known = {c.lower() for c in self.choices} if self.ignore_case else set(self.choices)
        if (value.lower() if self.ignore_case else value) in known:
            return None
        return f"{name} takes {self.text}, not {value[:40]!r}"


@dataclass(frozen=True)
class Pattern(Rule):
    """A value of a fixed shape (device lists, NCCL's protocol lists), matched whole."""

    pattern: str
    description: str
    ignore_case: bool = False

    @property
    def text(self) -> str:  # type: ignore[override]
        return self.description

    def refusal(self, name: str, value: str) -> str | None:
        if re.fullmatch(self.pattern, value, re.ASCII | (re.IGNORECASE if self.ignore_case else 0)):
            return None
        return f"{name} takes {self.text}, not {value[:40]!r}"


@dataclass(frozen=True)
class Secret(Rule):
    """An opaque credential (HF_TOKEN): any one line; it is shown masked, and never read as a path or an address."""

    text = "a token"

    def refusal(self, name: str, value: str) -> str | None:
        return None


def words(*choices: str) -> Pattern:
    """A comma-separated list of `choices`, optionally excluded as a whole with a leading ^ (NCCL's syntax; NCCL
    reads them in any case)."""
    one = "|".join(re.escape(c) for c in choices)
    return Pattern(rf"\^?({one})(,({one}))*", "a comma-separated list of " + ", ".join(choices), ignore_case=True)


BOOL = Choice(("0", "1", "true", "false", "yes", "no", "on", "off"), ignore_case=True)
