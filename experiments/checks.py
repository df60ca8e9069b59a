from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security, deploy=False)
def check_secret_key(app_configs, **kwargs):
    if not settings.SECRET_KEY:
        return [
            checks.Error(
                "SECRET_KEY is not set.",
                hint="Set the SECRET_KEY environment variable (only DEBUG=1 may run without one).",
                id="specdash.E001",
            )
        ]
    return []


@checks.register()
def check_redis_url(app_configs, **kwargs):
    if not settings.REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
        return [checks.Error(f"REDIS_URL {settings.REDIS_URL!r} is not a redis:// URL.", id="specdash.E002")]
    return []


@checks.register()
def check_webhook_networks(app_configs, **kwargs):
    from .rules import webhook_targets

    try:
        webhook_targets.networks(settings.SPECDASH_WEBHOOK_ALLOWED_NETWORKS)
    except ValueError as exc:
        return [checks.Error(f"SPECDASH_WEBHOOK_ALLOWED_NETWORKS: {exc}", id="specdash.E010")]
    return []
