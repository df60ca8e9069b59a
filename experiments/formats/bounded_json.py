"""JSON text in, bounded: what every JSON body of the API, every JSON field of a form and every uploaded JSON file is
read through, so that no handler, form or page sees a value the product cannot hold.

Allowed by list: RFC 8259 JSON (no NaN or Infinity, which no database column takes), nested at most MAX_DEPTH levels
(the deepest body the API states is six; a deeper one would only reach a recursion limit somewhere later, a 500),
whose strings and keys are text, i.e. hold no lone surrogate (a `"\\ud800"` escape decodes to one, which no UTF-8
encodes: the database, a page or a log line showing it fails). Pure: no Django.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 32
# What a JSON escape can decode to that is not text: half of a UTF-16 pair, alone.
_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_TEXT = "holds a lone surrogate (\\ud800-\\udfff), which is not text"
_MAX_KEY_SHOWN = 40


class JsonRefused(ValueError):
    """JSON this product does not read: `field` is where (a dotted path, "" for the whole text), `reason` why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


def loads(text: str | bytes, *, allow_nan: bool = False, max_depth: int = MAX_DEPTH) -> Any:
    """The value of a JSON text; JsonRefused (a ValueError, as for text that is not JSON) when it is nested deeper
    than `max_depth`, holds a lone surrogate, or (unless `allow_nan`, for files of tools that write them) NaN or
    Infinity."""
    try:
        value = json.loads(text, parse_constant=None if allow_nan else _no_constant)
    except RecursionError:
        # The decoder recurses per level and stops at the interpreter's limit: far past max_depth either way.
        raise JsonRefused("", f"nested deeper than {max_depth} levels") from None
    problem = refusal(value, max_depth=max_depth)
    if problem is not None:
        raise problem
    return value


def refusal(value: Any, *, max_depth: int = MAX_DEPTH) -> JsonRefused | None:
    """Why a decoded JSON value is refused (its first value nested past `max_depth`, or its first string or key with
    a lone surrogate, named by path), or None. Walks without recursion, so any depth is measured safely."""
    stack: list[tuple[Any, int, tuple[str, ...]]] = [(value, 0, ())]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, str):
            if _SURROGATE.search(node):
                return JsonRefused(_dotted(path), _NOT_TEXT)
            continue
        if not isinstance(node, dict | list):
            continue
        if depth >= max_depth:
            return JsonRefused(_dotted(path[:4]), f"nested deeper than {max_depth} levels")
        if isinstance(node, dict):
            for key, item in node.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    return JsonRefused(_dotted(path), f"a key {_NOT_TEXT}")
                stack.append((item, depth + 1, (*path, str(key)[:_MAX_KEY_SHOWN])))
        else:
            stack.extend((item, depth + 1, (*path, str(i))) for i, item in enumerate(node))
    return None


def text_refusal(text: str) -> str | None:
    """Why a string is not text (a lone surrogate), or None."""
    return _NOT_TEXT if _SURROGATE.search(text) else None


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _no_constant(name: str) -> Any:
    raise JsonRefused("", f"{name} is not a JSON number")
