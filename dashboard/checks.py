"""System checks of the deployment settings: fail loudly on configuration that would be unsafe or mean nothing."""

from __future__ import annotations

import ipaddress
import os
import re
import stat

from django.conf import settings
from django.core import checks

from workers.benchclient import prometheus

# One DNS label (RFC 1123); a name's last label is never all digits, or it would be a mistyped address.
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$", re.IGNORECASE)


def allowlist_entry_error(entry: str) -> str | None:
    """Why `entry` is neither an IP network (CIDR or a single address) nor an exact host name, or None."""
    try:
        ipaddress.ip_network(entry, strict=False)
        return None
    except ValueError:
        pass
    if "/" in entry or ":" in entry:
        return "not an IP network (CIDR such as 10.0.0.0/8 or fd00::/8)"
    labels = entry.rstrip(".").split(".")
    if len(entry) > 253 or not all(_LABEL.match(label) for label in labels):
        return "not a host name (letters, digits and hyphens, dot-separated; no wildcards)"
    if labels[-1].isdigit():
        return "not a valid IP address"
    return None


@checks.register(checks.Tags.security)
def check_host_allowlist(app_configs, **kwargs):
    found: list[checks.CheckMessage] = [
        checks.Error(
            f"SPECDASH_HOST_ALLOWLIST entry {entry!r} is {reason}.",
            hint="List IP networks in CIDR (127.0.0.0/8, ::1/128) and exact host names, comma-separated.",
            id="specdash.E101",
        )
        for entry in settings.SPECDASH_HOST_ALLOWLIST
        if (reason := allowlist_entry_error(entry))
    ]
    if settings.PRODUCTION and not settings.SPECDASH_HOST_ALLOWLIST:
        found.append(
            checks.Warning(
                "SPECDASH_HOST_ALLOWLIST is empty: workers will connect to no GPU host.",
                hint="Set it to the networks or names of your GPU hosts.",
                id="specdash.W101",
            )
        )
    return found


@checks.register(checks.Tags.security)
def check_production(app_configs, **kwargs):
    if not settings.PRODUCTION:
        return []
    found: list[checks.CheckMessage] = []
    if settings.DEBUG:
        found.append(
            checks.Error(
                "DEBUG is on in production mode (SPECDASH_PRODUCTION=1).",
                hint="Unset DEBUG: it shows settings and source in error pages.",
                id="specdash.E102",
            )
        )
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        found.append(
            checks.Warning(
                "Production mode runs on SQLite.",
                hint="Set DATABASE_URL to PostgreSQL: the web server and workers on other machines share it.",
                id="specdash.W103",
            )
        )
    return found


@checks.register(checks.Tags.security)
def check_secret_key_file(app_configs, **kwargs):
    path = settings.VAR_DIR / "secret_key"
    if path.is_file() and path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return [
            checks.Warning(
                f"{path} can be read by other users.",
                hint=f"chmod 600 {path}",
                id="specdash.W102",
            )
        ]
    return []


@checks.register()
def check_server_metrics_interval(app_configs, **kwargs):
    # The benchmark client refuses any other value (and exits 2), which would fail every benchmark cell.
    value, low, high = settings.SPECDASH_SERVER_METRICS_MS, prometheus.MIN_INTERVAL_MS, prometheus.MAX_INTERVAL_MS
    if value == 0 or low <= value <= high:
        return []
    return [
        checks.Error(
            f"SPECDASH_SERVER_METRICS_MS is {value}.",
            hint=f"0 (never scrape the server's /metrics during a cell) or {low}-{high} ms.",
            id="specdash.E120",
        )
    ]


MAX_LOG_BATCH_GAP = 0.5  # seconds: past that a live line waits longer than the old 0.1 s poll by far


@checks.register()
def check_log_batch_gap(app_configs, **kwargs):
    # Negative waits nothing, but a gap of seconds would hold every live line that long.
    value = settings.SPECDASH_LOG_BATCH_GAP
    if 0 <= value <= MAX_LOG_BATCH_GAP:
        return []
    return [
        checks.Error(
            f"SPECDASH_LOG_BATCH_GAP is {value}.",
            hint=f"0-{MAX_LOG_BATCH_GAP} s between two batches of a steady log stream (default 0.02).",
            id="specdash.E121",
        )
    ]


@checks.register()
def check_run_storage_caps(app_configs, **kwargs):
    # The hosts' own caps are held to these bounds by their form; a default outside them would mean no cap, or one
    # that stores nothing.
    from experiments.models.hosts import RUN_LOG_CAP_MIB_BOUNDS, RUN_TRACE_CAP_MIB_BOUNDS

    wanted = {
        "SPECDASH_RUN_LOG_CAP_MIB": RUN_LOG_CAP_MIB_BOUNDS,
        "SPECDASH_RUN_TRACE_CAP_MIB": RUN_TRACE_CAP_MIB_BOUNDS,
    }
    return [
        checks.Error(
            f"{name} is {getattr(settings, name)}.",
            hint=f"{low}-{high} MiB a run (the most one run may store in the database).",
            id="specdash.E122",
        )
        for name, (low, high) in wanted.items()
        if not low <= getattr(settings, name) <= high
    ]


REMOVED_SETTINGS = {
    "SPECDASH_LOG_BATCH_SECONDS": "Live log lines are pushed as soon as the batch before them is stored (2026-12-04); "
    "SPECDASH_LOG_BATCH_GAP sets the least time between two batches of a steady stream.",
}


@checks.register()
def check_removed_settings(app_configs, **kwargs):
    # A deployment's environment file outlives the settings it names: say so rather than ignore it in silence.
    return [
        checks.Warning(
            f"{name} is set but no longer read.",
            hint=instead,
            id="specdash.W130",
        )
        for name, instead in REMOVED_SETTINGS.items()
        if name in os.environ
    ]
