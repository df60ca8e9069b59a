"""A run's states, apart from the run's model: the experiment and the config a run belongs to read them (an
experiment's status, a config frozen by a finished run) without importing the run's module, which imports theirs."""

from __future__ import annotations

from typing import Protocol

from django.db import models


class RunState(models.TextChoices):
    QUEUED = "queued"
    CONNECTING = "connecting"
    PREFLIGHT = "preflight"
    LAUNCHING = "launching"
    LOADING = "loading"
    WARMING = "warming"
    READY = "ready"
    VERIFYING = "verifying"
    BENCHMARKING = "benchmarking"
    TEARDOWN = "teardown"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


class StatedRun(Protocol):
    """What an experiment's status reads of each of its runs."""

    @property
    def state(self) -> str: ...

    @property
    def is_finished(self) -> bool: ...
