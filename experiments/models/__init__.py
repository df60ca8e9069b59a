"""The domain of specdash: hosts, configs, profiles, experiments, runs, measurements, logs, review.

One module per concern; everything is importable from `experiments.models`.
"""

from .audit import AuditEvent, AuditEventQuerySet
from .configs import MANAGED_FLAGS, BenchmarkProfile, BenchmarkProfileQuerySet, ServerConfig, ServerConfigQuerySet
from .experiments import Candidate, Experiment
from .hosts import KEY_FILE_NAME, Host, HostQuerySet, SshKey
from .review import Flag, FlagComment, FlagQuerySet, PinnedBaseline, PinnedBaselineQuerySet
from .runs import LogChunk, LogChunkQuerySet, Measurement, Run, RunQuerySet
from .tokens import ApiToken, ApiTokenQuerySet

__all__ = [
    "KEY_FILE_NAME",
    "MANAGED_FLAGS",
    "ApiToken",
    "ApiTokenQuerySet",
    "AuditEvent",
    "AuditEventQuerySet",
    "BenchmarkProfile",
    "BenchmarkProfileQuerySet",
    "Candidate",
    "Experiment",
    "Flag",
    "FlagComment",
    "FlagQuerySet",
    "Host",
    "HostQuerySet",
    "LogChunk",
    "LogChunkQuerySet",
    "Measurement",
    "PinnedBaseline",
    "PinnedBaselineQuerySet",
    "Run",
    "RunQuerySet",
    "ServerConfig",
    "ServerConfigQuerySet",
    "SshKey",
]
