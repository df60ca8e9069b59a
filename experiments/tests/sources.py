"""Reading the project's own source in tests (the layout rules, the launch-field table, the quota gate)."""

from __future__ import annotations

import ast

# CPython 3.11.7's AST validator keeps its recursion depth per interpreter, not per thread: a compile() that runs
# while another thread of the same process parses (a live server's, a worker thread's import) can fail with
# "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905, fixed in later releases). The source is
# fine; parsing it again succeeds.
_ATTEMPTS = 3


def parse(text: str, where: str = "<unknown>") -> ast.Module:
    for attempt in range(_ATTEMPTS):
        try:
            return ast.parse(text, where)
        except SystemError as error:
            if "recursion depth mismatch" not in str(error) or attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
