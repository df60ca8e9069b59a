"""How a run's phases stop early: a failure of a known kind (with the log excerpt that proves it), or a cancel."""

from __future__ import annotations


class RunFailed(Exception):
    def __init__(self, kind: str, message: str, excerpt: str = "", first_line: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.excerpt = excerpt
        self.first_line = first_line


class RunCancelled(Exception):
    pass
