"""A failed run's remedy as a new version of its config, validated as a config made by hand would be (the launch
policy on the experiment's host, the config form's checks) before `do_rerun_with_remedy` saves and queues it."""

from __future__ import annotations

from experiments.remedies import Remedy, RemedyRefused
from experiments.rules import config_names

from ..models import Run, ServerConfig
from .configs import ServerConfigForm, config_form_data
from .values import plain_errors

CONFIG_NAME_MAX = ServerConfig._meta.get_field("name").max_length or 128


def remedied_config(run: Run, remedy_id: str) -> tuple[Remedy, ServerConfig]:
    """`run`'s remedy `remedy_id` and its config changed by it, unsaved and valid, named after the change; raises
    RemedyRefused for a remedy the run does not have, for advice, and with the form's errors for a refused config."""
    remedy = next((r for r in run.remedies() if r.id == remedy_id), None)
    if remedy is None:
        raise RemedyRefused(f"Run {run.pk} has no remedy “{remedy_id[:64]}”.", kind="not_found")
    if remedy.change is None:
        raise RemedyRefused(f"“{remedy.title}” is advice, not a change of the config: nothing to re-run.")
    old = run.config
    name = config_names.remedy_name(old.name, remedy.label, CONFIG_NAME_MAX)
    # The same rules as a config made by hand: the launch policy (on this host), the form's checks.
    form = ServerConfigForm(config_form_data({**remedy.change.apply(old.launch_spec()), "name": name}))
    form.launches_on(run.experiment.host)
    if not form.is_valid():
        raise RemedyRefused(f"The config with “{remedy.title}” is refused.", plain_errors(form))
    return remedy, form.save_unsaved()
