from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "dashboard.demo"
    label = "demo"
