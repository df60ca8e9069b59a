"""Validation of everything a user submits; the JSON API feeds the same forms (one source of truth).

One module per concern; everything is importable from `experiments.forms`.
"""

from .configs import ServerConfigForm, config_form_data
from .hosts import DraftExportForm, HostForm, SshKeyForm
from .logins import LoginForm
from .notes import ExperimentNotesForm, RunNotesForm
from .profiles import BenchmarkProfileForm
from .prompts import PromptSetUploadForm
from .quotas import MemberQuotaForm
from .review import CadenceForm, FlagBulkTriageForm, FlagTriageForm, RerunForm
from .submission import (
    ExperimentForm,
    ExperimentSubmission,
    apply_profile_defaults,
    profile_form_data,
)
from .users import RoleForm, TeammateForm
from .values import (
    CONTROL_CHARS,
    ENV_NAME,
    MAX_CONCURRENCY,
    check_env,
    check_extra_args,
    format_env,
    parse_concurrency,
    parse_env,
    parse_extra_args,
    plain_errors,
)

__all__ = [
    "CONTROL_CHARS",
    "ENV_NAME",
    "MAX_CONCURRENCY",
    "BenchmarkProfileForm",
    "CadenceForm",
    "DraftExportForm",
    "ExperimentForm",
    "ExperimentNotesForm",
    "ExperimentSubmission",
    "FlagBulkTriageForm",
    "FlagTriageForm",
    "HostForm",
    "LoginForm",
    "MemberQuotaForm",
    "PromptSetUploadForm",
    "RerunForm",
    "RoleForm",
    "RunNotesForm",
    "ServerConfigForm",
    "SshKeyForm",
    "TeammateForm",
    "apply_profile_defaults",
    "check_env",
    "check_extra_args",
    "config_form_data",
    "format_env",
    "parse_concurrency",
    "parse_env",
    "parse_extra_args",
    "plain_errors",
    "profile_form_data",
]
