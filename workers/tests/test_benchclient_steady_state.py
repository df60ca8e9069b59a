"""Steady-state figures of a cell: throughput and accept length over the longest stretch with the concurrency held,
computed by hand on made-up timings (ramp-up, tail, a gap, a slot handed over, concurrency 1, nothing that
qualifies), then on the simulated host, where leaving out the tail must not lower the throughput."""

from __future__ import annotations

import pytest

from simhost.tests.conftest import EAGLE3_2STEP, launch, state_dir  # noqa: F401  (fixtures)
from workers.benchclient import steady_state
from workers.benchclient.client import BenchConfig, run_benchmark
from workers.benchclient.metrics import RequestRecord

STEP = 1 / 16  # one chunk every 62.5 ms: exact in binary, so the window's edges compare exactly


def _request(start: float, chunks: int, *, tokens: int = 1, verify: int | None = None, **kwargs) -> RequestRecord:
    """A request sent at `start` whose `chunks` chunks of `tokens` tokens arrive every STEP; it ends with its last."""
    times = [start + (k + 1) * STEP for k in range(chunks)]
    return RequestRecord(
        prompt_len=4,
        start=start,
        end=times[-1],
        chunk_times=times,
        chunk_tokens=[tokens] * chunks,
        output_len=chunks * tokens,
        spec_verify_ct=verify,
        **kwargs,
    )


def test_it_leaves_out_the_ramp_up_and_the_tail() -> None:
    # c=2: A alone for 1 s, then A and B together for 0.5 s, then B alone to the end.
    a = _request(0.0, 24, verify=12)  # 24 tokens over 12 verify steps: 2.0, ends at 1.5
    b = _request(1.0, 16, tokens=2, verify=8)  # 32 tokens over 8: 4.0, ends at 2.0

    figures = steady_state.figures([a, b], concurrency=2)

    # The window (1.0, 1.5]: A's chunks 17..24 (8 tokens) and B's 1..8 (16 tokens).
    assert figures["steady_state_window_s"] == 0.5
    assert figures["steady_state_output_throughput"] == pytest.approx(24 / 0.5)
    # A: a third of its tokens inside, so 12 / 3 = 4 of its steps; B: half, 4 of its 8. 24 tokens over 8 steps,
    # where the whole cell gives 56 / 20 = 2.8.
    assert figures["steady_state_accept_length"] == pytest.approx(3.0)


def test_a_gap_ends_the_stretch_and_the_longest_one_counts() -> None:
    first = [_request(0.0, 16), _request(0.0, 16)]  # both in flight for 1 s
    second = [_request(1.5, 24, tokens=3), _request(1.5, 24, tokens=3)]  # after half a second idle, for 1.5 s

    figures = steady_state.figures([*first, *second], concurrency=2)

    assert figures["steady_state_window_s"] == 1.5
    assert figures["steady_state_output_throughput"] == pytest.approx(2 * 72 / 1.5)
    assert figures["steady_state_accept_length"] is None  # no verify steps: a non-speculative server


def test_a_slot_handed_to_the_next_request_does_not_end_the_stretch() -> None:
    # B's slot goes to C 5 ms after B ends (the client's next send): shorter than a chunk interval, so held.
    a, b = _request(0.0, 32), _request(0.0, 16)
    c = _request(1.005, 15)

    assert steady_state.held_window([a, b, c], 2, bridge_s=STEP) == (0.0, 1.005 + 15 * STEP)
    assert steady_state.held_window([a, b, c], 2, bridge_s=0.0) == (0.0, 1.0)  # without the bridge
    assert steady_state.figures([a, b, c], concurrency=2)["steady_state_window_s"] == pytest.approx(1.9425)


def test_at_concurrency_1_the_whole_busy_span_qualifies() -> None:
    a = _request(0.0, 16, tokens=2, verify=8)
    b = _request(1.02, 16, tokens=2, verify=16)  # sent 20 ms after A ended

    figures = steady_state.figures([a, b], concurrency=1)

    assert figures["steady_state_window_s"] == pytest.approx(2.02)
    assert figures["steady_state_output_throughput"] == pytest.approx(64 / 2.02)
    assert figures["steady_state_accept_length"] == pytest.approx(64 / 24)


@pytest.mark.parametrize(
    "records",
    [
        [_request(0.0, 16), _request(0.0, 16)],  # never 4 in flight (3.2 needed)
        [_request(0.0, 16), _request(0.0, 2), _request(0.0, 16), _request(0.0, 16)],  # 4 for only 125 ms
        [],
        [RequestRecord(prompt_len=4, start=0.0, error="model lookup failed")] * 4,
    ],
    ids=["under-the-ratio", "too-short", "no-requests", "all-failed"],
)
def test_it_reports_none_when_no_window_qualifies(records: list[RequestRecord]) -> None:
    assert steady_state.figures(records, concurrency=4) == dict.fromkeys(steady_state.KEYS)


def test_a_window_shorter_than_three_chunk_intervals_is_not_a_rate() -> None:
    slow = [RequestRecord(prompt_len=4, start=0.0, end=2.0, chunk_times=[1.0, 2.0], chunk_tokens=[1, 1],
                          output_len=2) for _ in range(2)]  # fmt: skip
    late = RequestRecord(prompt_len=4, start=1.5, end=3.0, chunk_times=[2.0, 3.0], chunk_tokens=[1, 1], output_len=2)

    # 3 in flight for 0.5 s (>= 0.2 s) but the chunks come a second apart.
    assert steady_state.figures([*slow, late], concurrency=3)["steady_state_window_s"] is None


def test_failed_requests_count_neither_in_flight_nor_tokens() -> None:
    ok = [_request(0.0, 16), _request(0.0, 16)]
    failed = _request(0.0, 32, error="HTTP 500")

    assert steady_state.figures([*ok, failed], concurrency=3)["steady_state_window_s"] is None
    assert steady_state.figures([*ok, failed], concurrency=2)["steady_state_output_throughput"] == pytest.approx(32.0)


def test_openai_chunks_are_scaled_to_the_reported_output_length() -> None:
    a, b = _request(0.0, 16), _request(0.0, 16)
    a.output_len = b.output_len = 48  # one count per text chunk, three tokens each by the usage

    assert steady_state.figures([a, b], concurrency=2)["steady_state_output_throughput"] == pytest.approx(96.0)


# --- against the simulated host ---------------------------------------------------------------------


async def test_on_the_simulated_host_the_held_window_is_shorter_and_no_slower_than_the_cell(launch):  # noqa: F811
    # At the simulated GPU's own pace (SIMHOST_SPEED 1), so the tail, 3, 2, then 1 request in flight, is slower.
    server = launch(*EAGLE3_2STEP, env={"SIMHOST_SGLANG_VERSION": "0.5.23"})
    server.wait_ready()

    config = BenchConfig(base_url=server.base, concurrency=4, num_prompts=16, input_len=64, output_len=48)
    result, code = await run_benchmark(config)

    assert code == 0 and result["completed"] == 16, result
    window = result["steady_state_window_s"]
    assert window is not None and 0 < window < result["duration_s"]
    # Relative within the cell only: the machine running the test may be loaded.
    assert result["steady_state_output_throughput"] >= result["output_throughput"]
    # The simulated draft accepts alike all along: the window's accept length is the cell's, near enough.
    assert result["steady_state_accept_length"] == pytest.approx(result["accept_length"], rel=0.1)
