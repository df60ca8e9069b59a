"""A config checked as it would launch on one host, when it did not come through the submission form: a config an
import files its runs under, and a stored config queued again ("Profile this run").

The same rules as a submitted config: the config form's own (each path and name one bounded, printable argument
that cannot read as a flag; the algorithm one of SGLang's; numbers within their bounds; speculative settings that
agree) with the launch policy of the host (its allowed flags and variables, its SGLang's flags), and the
submission's rules of the host (every model under its models root, tp within its GPUs)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from typing import Any

from django.core.exceptions import ValidationError

from experiments.formats import imported_results
from experiments.formats.imported_results import Server, vllm_bench
from experiments.rules import launch_fields, model_paths

from ..models import Host, ServerConfig
from .configs import ServerConfigForm, config_form_data
from .values import CONFLICT, NOT_FOUND, plain_errors

CONFIG_NAME_MAX = ServerConfig._meta.get_field("name").max_length or 128


class HostedConfigForm(ServerConfigForm):
    def __init__(self, payload: dict[str, Any], host: Host) -> None:
        super().__init__(config_form_data(payload))
        self.launches_on(host)
        self.host = host

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        for field, label in model_paths.MODEL_PATH_FIELDS.items():
            value = data.get(field)
            refusal = model_paths.model_path_refusal(label, value, self.host.models_root) if value else None
            if refusal:
                self.add_error(field, ValidationError(refusal + ".", code=NOT_FOUND))
        tp = data.get("tp_size")
        if tp and self.host.gpu_count and tp > self.host.gpu_count:
            self.add_error(
                "tp_size", ValidationError(f"Host {self.host.name} has {self.host.gpu_count} GPUs, fewer than tp {tp}.",
                                           code=CONFLICT)
            )  # fmt: skip
        return data


class ImportRefused(Exception):
    """Configs an import would file its runs under that may not launch on its host: `errors` by field
    (`files[i].model_path`), `forms` the refusing forms (their error codes say the status)."""

    def __init__(self, errors: dict[str, list[str]], forms: list[HostedConfigForm]) -> None:
        super().__init__("; ".join(m for ms in errors.values() for m in ms))
        self.errors, self.forms = errors, forms


def imported_configs(files: Sequence[tuple[str, str, str, Sequence[Server]]], host: Host) -> dict[tuple, ServerConfig]:
    """Each server the files say was measured (`files`: (where, file name, format, servers)) as an unsaved, valid
    config keyed by `Server.key`, named after what it is; raises ImportRefused naming each file, field and where
    the file states it, so nothing is imported with a config a submission would have refused."""
    configs: dict[tuple, ServerConfig] = {}
    errors: dict[str, list[str]] = {}
    refusing: list[HostedConfigForm] = []
    for where, file_name, fmt, servers in files:
        # A vLLM result file measured a vLLM server: its config is a vLLM config, under vLLM's names.
        engine = launch_fields.VLLM if fmt == imported_results.VLLM else launch_fields.SGLANG
        for server in servers:
            fields = {"model_path": server.model_path, "tp_size": server.tp_size, **server.speculative}
            data = {"name": imported_config_name(server), **launch_fields.sglang_spec_as(engine, fields)}
            form = HostedConfigForm(data, host)
            if form.is_valid():
                configs.setdefault(server.key, form.save_unsaved())
                continue
            refusing.append(form)
            for field, messages in plain_errors(form).items():
                if field == "name" and len(form.errors) > 1:
                    continue  # the name is made from the model path, whose own error says it
                # A field the importer stated is refused as its `given` one, wherever the format would hold it.
                stated = f"given.{field}" if field in server.given else _STATED.get(fmt, str)(field)
                errors.setdefault(f"{where}.{field}", []).extend(
                    f"{file_name[:80]}: {message} (the file's {stated})" for message in messages
                )
    if errors:
        raise ImportRefused(errors, refusing)
    return configs


def imported_config_name(server: Server) -> str:
    """ "<model> <algorithm> s<steps> k<topk> d<draft tokens> tp<n>", as much of it as the file says."""
    model = posixpath.basename(server.model_path.rstrip("/")) or server.model_path
    spec = server.speculative
    parts = [model]
    if spec.get("speculative_algorithm"):
        parts.append(str(spec["speculative_algorithm"]).lower())
        for row in launch_fields.fields(launch_fields.SGLANG):
            if row.name_letter and spec.get(row.name) is not None:
                parts.append(f"{row.name_letter}{spec[row.name]}")
    if server.tp_size > 1:
        parts.append(f"tp{server.tp_size}")
    return " ".join(parts)[:CONFIG_NAME_MAX]


# Where each format states a config's field: the refusal says what to change in the file (or in `given`).
_STATED: dict[str, Callable[[str], str]] = {
    imported_results.SGLANG: lambda field: f"server_info.{field}",
    imported_results.VLLM: lambda field: vllm_bench.STATED_AT.get(field, "speculative_config.num_speculative_tokens"),
    imported_results.SPECFORGE: lambda field: f"given.{field}",
}


def stored_config_form(config: ServerConfig, host: Host) -> HostedConfigForm:
    """The form of a stored config as it would be launched again on `host` today: valid only where it still may be
    (the host's rules may have changed since it was made; an imported config never passed the form before)."""
    return HostedConfigForm({**config.launch_spec(), "name": config.name}, host)
