"""The live log's websocket messages: every line once, in order, numbered, in messages daphne carries, long lines
cut with a note; the part of a message after a line a page already has; and a message read back as a page does."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from experiments.live.log_messages import LIVE_LINE_CHARS, MESSAGE_CHARS, batch, lines_messages, parse

DAPHNE_MESSAGE_BYTES = 1024 * 1024

# Log lines never hold a newline (the log is cut at them); anything else may be in one.
line_texts = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", blacklist_characters="\n"), max_size=300),
    st.text(alphabet='"\\\t\r\x00é€😀{}', max_size=200),
    st.builds(lambda n, c: c * n, st.integers(0, 3 * LIVE_LINE_CHARS), st.sampled_from('x€"')),
)


def _shown(line: str) -> str:
    if len(line) <= LIVE_LINE_CHARS:
        return line
    left_out = len(line) - LIVE_LINE_CHARS
    return f"{line[:LIVE_LINE_CHARS]} … [{left_out:,} more characters: the downloaded log has it whole]"


@given(first=st.integers(1, 10**9), lines=st.lists(line_texts, max_size=40))
def test_every_line_arrives_once_in_order_in_messages_daphne_carries(first, lines):
    received: list[str] = []
    for message in lines_messages(first, lines):
        assert len(message.text.encode()) < DAPHNE_MESSAGE_BYTES
        data = parse(message.text)
        assert data["type"] == "lines" and data["first"] == message.first == first + len(received)
        assert len(data["lines"]) == data["count"] == message.count >= 1
        received += data["lines"]
    assert received == [_shown(line) for line in lines]


def test_a_flood_batch_goes_in_messages_as_full_as_the_limit_allows():
    lines = [f"[TP0] Decode batch [{n}], gen throughput (token/s): 93.10" for n in range(1, 10_001)]

    messages = lines_messages(1, lines)

    sizes = [len(m.body) for m in messages]
    assert all(size <= MESSAGE_CHARS for size in sizes)
    # Each but the last would have overflowed with its next line.
    assert all(size + 1 + len(lines[m.last]) > MESSAGE_CHARS for size, m in zip(sizes[:-1], messages[:-1], strict=True))
    assert len(messages) == 9
    # The broadcast carries the text once, the messages as slices of it.
    assert batch(1, lines).text == "\n".join(lines)


def test_a_line_longer_than_a_message_is_cut_and_what_follows_it_goes_on():
    messages = lines_messages(7, ["short", "y" * (MESSAGE_CHARS * 2), "z" * LIVE_LINE_CHARS, "after"])

    # The cut line (32 Ki and its note) fits beside "short"; the next 32 Ki line no longer does.
    assert [(m.first, m.count) for m in messages] == [(7, 2), (9, 2)]
    assert parse(messages[0].text)["lines"][1].startswith("y" * LIVE_LINE_CHARS + " … [")
    assert parse(messages[1].text)["lines"] == ["z" * LIVE_LINE_CHARS, "after"]


def test_the_part_after_a_line_a_page_has_is_the_rest_numbered_on():
    (message,) = lines_messages(10, ["a", 'b "quoted"', "", "d"])

    rest = message.after(11)

    assert (rest.first, rest.count, rest.last) == (12, 2, 13)
    assert parse(rest.text) == {"type": "lines", "first": 12, "count": 2, "lines": ["", "d"]}


def test_a_message_is_a_json_header_then_the_lines():
    (message,) = lines_messages(3, ['{"not": "a header"}', ""])

    header, _, body = message.text.partition("\n")
    assert json.loads(header) == {"type": "lines", "first": 3, "count": 2}
    assert body == '{"not": "a header"}\n'
    assert parse('{"type": "state", "state": "ready"}') == {"type": "state", "state": "ready"}
