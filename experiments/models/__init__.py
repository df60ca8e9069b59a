"""The domain of specdash: hosts, configs, profiles, experiments, runs, measurements, logs, review,
quotas.

One module per concern; everything is importable from `experiments.models`.
"""

from .audit import AuditEvent, AuditEventQuerySet
from .configs import BenchmarkProfile, BenchmarkProfileQuerySet, ServerConfig, ServerConfigQuerySet
from .environments import GpuSample, GpuSampleQuerySet, RunEnvironment, ServerMetricSample, ServerMetricSampleQuerySet
from .experiments import Candidate, Experiment
from .headroom import HeadroomStudy
from .hosts import KEY_FILE_NAME, Host, HostQuerySet, SshKey
from .log_chunks import LogChunk, LogChunkQuerySet
from .measurements import Measurement, MeasurementQuerySet
from .notifications import Delivery, DeliveryQuerySet, Event, Subscription, SubscriptionQuerySet
from .profile_traces import ProfileTrace
from .prompts import PromptResults, PromptSet
from .quotas import MemberQuota
from .review import Flag, FlagComment, FlagQuerySet, FlagSeries, PinnedBaseline, PinnedBaselineQuerySet
from .runs import Run, RunQuerySet
from .schedules import AdaptiveSchedule
from .studies import Study, StudyConfig, StudyRound
from .suspicions import SuspectSeries, Suspicion, SuspicionQuerySet
from .tokens import ApiToken, ApiTokenQuerySet

__all__ = [
    "KEY_FILE_NAME",
    "AdaptiveSchedule",
    "ApiToken",
    "ApiTokenQuerySet",
    "AuditEvent",
    "AuditEventQuerySet",
    "BenchmarkProfile",
    "BenchmarkProfileQuerySet",
    "Candidate",
    "Delivery",
    "DeliveryQuerySet",
    "Event",
    "Experiment",
    "Flag",
    "FlagComment",
    "FlagQuerySet",
    "FlagSeries",
    "GpuSample",
    "GpuSampleQuerySet",
    "HeadroomStudy",
    "Host",
    "HostQuerySet",
    "LogChunk",
    "LogChunkQuerySet",
    "Measurement",
    "MeasurementQuerySet",
    "MemberQuota",
    "PinnedBaseline",
    "PinnedBaselineQuerySet",
    "ProfileTrace",
    "PromptResults",
    "PromptSet",
    "Run",
    "RunEnvironment",
    "RunQuerySet",
    "ServerConfig",
    "ServerConfigQuerySet",
    "ServerMetricSample",
    "ServerMetricSampleQuerySet",
    "SshKey",
    "Study",
    "StudyConfig",
    "StudyRound",
    "Subscription",
    "SubscriptionQuerySet",
    "SuspectSeries",
    "Suspicion",
    "SuspicionQuerySet",
]
