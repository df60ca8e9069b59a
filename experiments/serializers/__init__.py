"""The one JSON shape of each noun, one module per noun: the API answers with these, and the websocket events and the
exports use them too, so a field is added in one place. Secret-looking environment values are masked here
(`configs`). Nothing outside this package builds a noun's JSON."""

from .comparisons import comparison_row_json, comparison_rows_json, equivalence_json, outputs_gates_json, verdicts_json
from .configs import config_history_json, config_json, config_search_json, profile_search_json
from .deployment import deployment_json
from .draft_checkpoints import refused_directory_json, training_directory_json
from .experiments import (
    accept_length_json,
    cadence_json,
    experiment_export_json,
    experiment_json,
    experiment_row_json,
    queued_experiment_json,
)
from .flags import flag_json, suspicion_json
from .headroom import headroom_json
from .hosts import host_json, models_listed_at
from .profiles import profile_json, prompt_set_json
from .runs import profile_trace_json, run_json, run_row_json, run_state_json, server_metric_samples_json
from .schedules import schedule_json
from .studies import study_json

__all__ = [
    "accept_length_json",
    "cadence_json",
    "comparison_row_json",
    "comparison_rows_json",
    "config_history_json",
    "config_json",
    "config_search_json",
    "deployment_json",
    "equivalence_json",
    "experiment_export_json",
    "experiment_json",
    "experiment_row_json",
    "flag_json",
    "headroom_json",
    "host_json",
    "models_listed_at",
    "outputs_gates_json",
    "profile_json",
    "profile_search_json",
    "profile_trace_json",
    "prompt_set_json",
    "queued_experiment_json",
    "refused_directory_json",
    "run_json",
    "run_row_json",
    "run_state_json",
    "schedule_json",
    "server_metric_samples_json",
    "study_json",
    "suspicion_json",
    "training_directory_json",
    "verdicts_json",
]
