from django.contrib import admin

from .models import (
    ApiToken,
    BenchmarkProfile,
    Candidate,
    Experiment,
    Host,
    LogChunk,
    Measurement,
    Run,
    ServerConfig,
)


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ["name", "address", "port", "username", "is_dirty", "active_run"]
    readonly_fields = ["active_run"]


@admin.register(ServerConfig)
class ServerConfigAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "speculative_algorithm",
        "speculative_num_steps",
        "tp_size",
        "content_hash",
        "created_at",
    ]
    search_fields = ["name", "model_path", "content_hash"]
    readonly_fields = ["content_hash"]


@admin.register(BenchmarkProfile)
class BenchmarkProfileAdmin(admin.ModelAdmin):
    list_display = ["name", "concurrency", "num_prompts", "input_len", "output_len", "passes", "launches"]


class CandidateInline(admin.TabularInline):
    model = Candidate
    extra = 0


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ["name", "host", "baseline", "profile", "created_by", "created_at"]
    inlines = [CandidateInline]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "experiment", "config", "host", "state", "failure_kind", "heartbeat_at"]
    list_filter = ["state", "failure_kind", "host"]
    raw_id_fields = ["experiment", "config"]


@admin.register(Measurement)
class MeasurementAdmin(admin.ModelAdmin):
    list_display = ["run", "pass_index", "concurrency", "output_throughput", "accept_length", "failed"]
    raw_id_fields = ["run"]


@admin.register(LogChunk)
class LogChunkAdmin(admin.ModelAdmin):
    list_display = ["run", "first_line", "line_count"]
    raw_id_fields = ["run"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["user", "name", "created_at", "last_used_at"]
    readonly_fields = ["digest"]
