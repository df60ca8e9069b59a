"""How long one launch takes on a host, as the median of its recent succeeded launches of the closest kind: the value
that `reads/queueing.py` reads from a host's history, and that the queue's estimates and the sweep preview show."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchEstimate:
    seconds: float  # median wall time of one launch, from its claim to its end
    runs: int  # how many succeeded runs it is the median of
    basis: str  # "config": same config and request shape; "profile": same request shape; "host": any run there
