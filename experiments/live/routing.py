from django.urls import path

from experiments.live import consumers

websocket_urlpatterns = [
    path("ws/runs/<int:run_id>/log/", consumers.RunLogConsumer.as_asgi()),
    path("ws/experiments/<int:experiment_id>/", consumers.ExperimentConsumer.as_asgi()),
    path("ws/studies/<int:study_id>/", consumers.StudyConsumer.as_asgi()),
    path("ws/notifications/", consumers.NotificationConsumer.as_asgi()),
]
