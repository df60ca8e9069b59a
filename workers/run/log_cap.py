"""A run's stored log held to its host's cap (`Host.run_log_cap`), so that one run cannot fill the database: the
batch that would pass the cap is stored up to it, then a marker line that says where the rest is (the file on the
host, downloadable from the run page); nothing after it is stored. The lines past the cut are still read for their
facts (`ServerLog`), and those the run reads back (a cell's Decode lines, an expected text, a profile's end) are
kept here, the newest UNSTORED_KEPT of them."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from experiments.models.hosts import MIB

LOG_CUT_KIND = "log_cut"
# A flood of Decode lines is ~20 MB of them: a cell's summary past the cut reads its last ones.
UNSTORED_KEPT = 100_000


def cut_marker(cap: int, path: str) -> str:
    """The stored log's last line once it is cut at `cap` bytes."""
    return f"[specdash] log cut at {cap // MIB} MiB: the rest is on the host at {path}; download it from the run page"


def cut_warning(cap: int, line: int, path: str) -> str:
    return (
        f"The server log passed this host's cap of {cap // MIB} MiB a run: it is stored up to line {line}, and the "
        f"rest is on the host at {path} (download it from the run page). The run goes on; its measurements are "
        "stored as usual."
    )


def text_bytes(lines: list[str]) -> int:
    """Bytes the lines take stored: UTF-8, a newline each (a whole chunk's text is one encode)."""
    return len("\n".join(lines).encode()) + 1 if lines else 0


class LogCap:
    """Where a run's stored log stands against its cap: `stored_bytes` so far, whether it is `cut`."""

    def __init__(self, cap: int, *, stored_bytes: int, cut: bool, path: str, kept_texts: Iterable[str]) -> None:
        self.cap = cap
        self.stored_bytes = stored_bytes
        self.cut = cut
        self.path = path
        self._kept_texts = set(kept_texts)
        self._unstored: deque[tuple[int, str]] = deque(maxlen=UNSTORED_KEPT)

    def hold(self, first_line: int, lines: list[str]) -> tuple[list[str], int, dict[str, Any]]:
        """The batch as read (with the marker line in it where the cap cuts it: the lines after are numbered after
        it), how many of its first lines to store, and the run's fields that go with them."""
        if not self.cut:
            size = text_bytes(lines)
            if self.stored_bytes + size <= self.cap:
                self.stored_bytes += size
                return lines, len(lines), {"log_bytes": self.stored_bytes}
            lines, stored, fields = self._cut(first_line, lines)
        else:
            stored, fields = 0, {}
        kept = self._kept_texts
        past = enumerate(lines[stored:], start=first_line + stored)
        self._unstored.extend((n, line) for n, line in past if any(text in line for text in kept))
        return lines, stored, fields

    def _cut(self, first_line: int, lines: list[str]) -> tuple[list[str], int, dict[str, Any]]:
        room, taken = self.cap - self.stored_bytes, 0
        for line in lines:
            line_bytes = len(line.encode()) + 1
            if line_bytes > room:
                break
            room -= line_bytes
            taken += 1
        marker = cut_marker(self.cap, self.path)
        self.stored_bytes += text_bytes([*lines[:taken], marker])
        self.cut = True
        fields = {"log_bytes": self.stored_bytes, "log_cut_line": first_line + taken}
        return [*lines[:taken], marker, *lines[taken:]], taken + 1, fields

    def keep(self, text: str) -> None:
        """Keep the lines past the cut that contain `text` too (from the next batch on)."""
        self._kept_texts.add(text)

    def kept_lines(self, *, after: int, limit: int, containing: str | None = None) -> list[dict[str, Any]]:
        """The kept lines past the cut after line `after`, at most `limit`, in `LogChunk.objects.lines`'s shape."""
        wanted = containing.casefold() if containing else None
        found: list[dict[str, Any]] = []
        for n, text in list(self._unstored):
            if len(found) >= limit:
                break
            if n > after and (wanted is None or wanted in text.casefold()):
                found.append({"n": n, "text": text})
        return found

    def kept_contains(self, text: str) -> bool:
        return any(text in line for _, line in list(self._unstored))
