"""The order in which an experiment's launches run. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def interleaved_order(configs: Sequence[T], launches: int) -> list[tuple[T, int]]:
    """A B C A B C ...: slow drift of the machine then hits every config alike."""
    return [(config, launch) for launch in range(launches) for config in configs]
