"""A remote log's bytes cut into complete lines, with a byte offset that only ever covers whole lines: what lets a
tail resume exactly where the stored lines end (`server_log.LogTail`). Pure."""

from __future__ import annotations


class LineAssembler:
    """Bytes in, complete lines out; the byte offset only ever covers whole lines, so a resume is exact.

    - a partial last line is held back until its newline arrives;
    - `\\r` rewrites (tqdm progress bars) keep the last state of the line;
    - invalid UTF-8 is replaced, never fatal (decoding is per complete line, so a multi-byte character split
      across reads is not mangled).
    """

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset  # bytes of the file consumed into complete lines
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[str]:
        self._pending += data
        end = self._pending.rfind(b"\n")
        if end < 0:
            return []
        complete = bytes(self._pending[: end + 1])
        del self._pending[: end + 1]
        self.offset += len(complete)
        return [_last_state(raw) for raw in complete[:-1].split(b"\n")]

    def finish(self) -> list[str]:
        """The partial last line as a final line: the writer is gone (a dying process prints no newline), so
        nothing will complete it. The offset then covers it too, so a later resume cannot store it twice."""
        if not self._pending:
            return []
        raw = bytes(self._pending)
        self._pending.clear()
        self.offset += len(raw)
        return [_last_state(raw)]

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)


def _last_state(raw: bytes) -> str:
    if raw.endswith(b"\r"):
        raw = raw[:-1]  # CRLF line ending, not a rewrite
    if b"\r" in raw:
        raw = raw.rsplit(b"\r", 1)[-1]
    return raw.decode("utf-8", errors="replace")
