"""A remote log's bytes cut into complete lines, with a byte offset that only ever covers whole lines: what lets a
tail resume exactly where the stored lines end (`log_tail.LogTail`). Pure."""

from __future__ import annotations


class LineAssembler:
    """Bytes in, complete lines out; the byte offset only ever covers whole lines, so a resume is exact.

    - a partial last line is held back until its newline arrives;
    - `\\r` rewrites (tqdm progress bars) keep the last state of the line;
    - invalid UTF-8 is replaced, never fatal (decoding is per complete line, so a multi-byte character split
      across reads is not mangled); so is a NUL byte, which PostgreSQL's text refuses (a crashing process that
      printed one would otherwise stop its log being stored at all).
    """

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset  # bytes of the file consumed into complete lines
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[str]:
        end = data.rfind(b"\n")
        if end < 0:
            self._pending += data
            return []
        complete = bytes(self._pending) + data[: end + 1] if self._pending else data[: end + 1]
        self._pending = bytearray(data[end + 1 :])
        self.offset += len(complete)
        return _complete_lines(complete)

    def finish(self) -> list[str]:
        """The partial last line as a final line: the writer is gone (a dying process prints no newline), so
        nothing will complete it. The offset then covers it too, so a later resume cannot store it twice."""
        if not self._pending:
            return []
        raw = bytes(self._pending)
        self._pending.clear()
        self.offset += len(raw)
        return [_last_state(_decoded(raw))]

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)


def _complete_lines(complete: bytes) -> list[str]:
    """Lines ending in newlines, decoded in one call: a flood is 10,000s of lines a second, and a newline byte is
    never inside a UTF-8 sequence, so this decodes each line exactly as decoding it alone would."""
    text = _decoded(complete)
    lines = text.split("\n")
    lines.pop()  # what follows the last newline: nothing
    return [_last_state(line) for line in lines] if "\r" in text else lines


def _decoded(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _last_state(line: str) -> str:
    if line.endswith("\r"):
        line = line[:-1]  # CRLF line ending, not a rewrite
    if "\r" in line:
        line = line.rsplit("\r", 1)[-1]
    return line
