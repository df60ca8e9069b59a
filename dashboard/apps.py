from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
