"""The live log's websocket messages, pure: numbered lines grouped and cut so that daphne carries every message.

A lines message is a JSON header, a newline, then the lines joined by newlines:
`{"type": "lines", "first": 41, "count": 3}\\nline 41\\nline 42\\nline 43`. JSON text never holds a raw newline, so
the header ends at the first one (every other message is JSON alone); a log line never holds one either (the log
is cut at them). The lines cross as they are, not as a JSON array of strings: escaping and parsing a flood's 2 MB
batch cost the worker ~6 ms and a browser as much again, where slicing the text the worker joins anyway to store
it costs nothing.

daphne refuses to send a websocket message over 1 MiB (its --websocket_max_message_size) and closes the socket
instead (1011): a flood's 20,000-line batch is 4 MB. So lines go in messages of at most MESSAGE_CHARS characters
(under 1 MiB whatever UTF-8 makes of them); and a single line longer than LIVE_LINE_CHARS is shown cut, with how
much was left out (the downloaded log has it whole).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

MESSAGE_CHARS = 64 * 1024
LIVE_LINE_CHARS = 32 * 1024


@dataclass(frozen=True)
class LinesMessage:
    """Lines `first`..`last`, joined by newlines (`body`), as a page is sent them."""

    first: int
    count: int
    body: str

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    @property
    def text(self) -> str:
        """The websocket message."""
        return json.dumps({"type": "lines", "first": self.first, "count": self.count}) + "\n" + self.body

    def after(self, line: int) -> LinesMessage:
        """The part of the message after `line` (a page that has the lines up to it)."""
        dropped = line - self.first + 1
        return LinesMessage(line + 1, self.count - dropped, self.body.split("\n", dropped)[dropped])


@dataclass(frozen=True)
class Batch:
    """A batch of lines as the broadcast carries it: the text of every message, and where each message's lines
    are in it (`bounds`: first line, count, start and end character)."""

    text: str
    bounds: list[tuple[int, int, int, int]]

    def messages(self) -> list[LinesMessage]:
        return [LinesMessage(first, count, self.text[start:end]) for first, count, start, end in self.bounds]


def batch(first: int, lines: list[str]) -> Batch:
    """`lines`, numbered from `first`, cut and grouped into the messages a page is sent."""
    if not lines:
        return Batch("", [])
    lengths = list(map(len, lines))
    if max(lengths) > LIVE_LINE_CHARS:
        lines = [_cut(line) if len(line) > LIVE_LINE_CHARS else line for line in lines]
        lengths = list(map(len, lines))
    # ends[i]: where line i's newline is (or would be) in the joined text. Each message holds the most lines that
    # fit in MESSAGE_CHARS (at least one).
    ends = list(accumulate(length + 1 for length in lengths))
    bounds = []
    start = 0
    while start < len(lines):
        offset = ends[start - 1] if start else 0
        stop = max(bisect_right(ends, offset + MESSAGE_CHARS, lo=start), start + 1)
        bounds.append((first + start, stop - start, offset, ends[stop - 1] - 1))
        start = stop
    return Batch("\n".join(lines), bounds)


def lines_messages(first: int, lines: list[str]) -> list[LinesMessage]:
    """`lines`, numbered from `first`, as the messages a page is sent, in order."""
    return batch(first, lines).messages()


def parse(text: str) -> dict[str, Any]:
    """A websocket message as a page reads it: a lines message's `lines` are a list (how live.js reads it too)."""
    header, newline, body = text.partition("\n")
    message = json.loads(header)
    if newline:
        message["lines"] = body.split("\n")
    return message


def _cut(line: str) -> str:
    left_out = len(line) - LIVE_LINE_CHARS
    return f"{line[:LIVE_LINE_CHARS]} … [{left_out:,} more characters: the downloaded log has it whole]"
