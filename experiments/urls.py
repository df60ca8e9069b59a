from django.urls import path

from . import views, views_flags, views_hosts

urlpatterns = [
    path("", views.experiment_list, name="experiment_list"),
    path("experiments/new/", views.experiment_new, name="experiment_new"),
    path("experiments/<int:experiment_id>/", views.experiment_detail, name="experiment_detail"),
    path(
        "experiments/<int:experiment_id>/export.csv",
        views.experiment_export_csv,
        name="experiment_export_csv",
    ),
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/log.txt", views.run_log_download, name="run_log_download"),
    path("runs/<int:run_id>/cancel/", views.cancel_run, name="cancel_run"),
    path("hosts/", views_hosts.host_list, name="host_list"),
    path("hosts/new/", views_hosts.host_new, name="host_new"),
    path("hosts/<int:host_id>/test/", views_hosts.test_host, name="test_host"),
    path("hosts/<int:host_id>/clean/", views_hosts.clean_host, name="clean_host"),
    path("flags/", views_flags.flag_list, name="flag_list"),
    path("flags/export.csv", views_flags.flag_export_csv, name="flag_export_csv"),
    path("flags/<int:flag_id>/", views_flags.flag_detail, name="flag_detail"),
    path(
        "history/<int:host_id>/<str:config_hash>/<str:profile_key>/",
        views_flags.series_detail,
        name="series_detail",
    ),
    path(
        "history/<int:host_id>/<str:config_hash>/<str:profile_key>/pin/",
        views_flags.pin_baseline,
        name="pin_baseline",
    ),
    path("experiments/<int:experiment_id>/rerun/", views_flags.rerun_experiment, name="rerun_experiment"),
    path("tokens/", views.token_list, name="token_list"),
    path("tokens/new/", views.create_token, name="create_token"),
]
