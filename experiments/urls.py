from django.urls import path

from .views import experiments, flags, hosts, runs, team, tokens

urlpatterns = [
    path("", experiments.experiment_list, name="experiment_list"),
    path("experiments/new/", experiments.experiment_new, name="experiment_new"),
    path("experiments/<int:experiment_id>/", experiments.experiment_detail, name="experiment_detail"),
    path(
        "experiments/<int:experiment_id>/export.csv",
        experiments.experiment_export_csv,
        name="experiment_export_csv",
    ),
    path(
        "experiments/<int:experiment_id>/export.json",
        experiments.experiment_export_json,
        name="experiment_export_json",
    ),
    path("experiments/<int:experiment_id>/rerun/", experiments.rerun_experiment, name="rerun_experiment"),
    path("runs/<int:run_id>/", runs.run_detail, name="run_detail"),
    path("runs/<int:run_id>/log.txt", runs.run_log_download, name="run_log_download"),
    path("runs/<int:run_id>/cancel/", runs.cancel_run, name="cancel_run"),
    path("hosts/", hosts.host_list, name="host_list"),
    path("hosts/new/", hosts.host_new, name="host_new"),
    path("hosts/<int:host_id>/", hosts.host_detail, name="host_detail"),
    path("hosts/<int:host_id>/edit/", hosts.host_edit, name="host_edit"),
    path("hosts/<int:host_id>/test/", hosts.test_host, name="test_host"),
    path("hosts/<int:host_id>/clean/", hosts.clean_host, name="clean_host"),
    path("keys/", hosts.key_list, name="key_list"),
    path("keys/new/", hosts.key_new, name="key_new"),
    path("keys/<int:key_id>/", hosts.key_edit, name="key_edit"),
    path("keys/<int:key_id>/delete/", hosts.key_delete, name="key_delete"),
    path("flags/", flags.flag_list, name="flag_list"),
    path("flags/export.csv", flags.flag_export_csv, name="flag_export_csv"),
    path("flags/<int:flag_id>/", flags.flag_detail, name="flag_detail"),
    path(
        "history/<int:host_id>/<str:config_hash>/<str:profile_key>/",
        flags.series_detail,
        name="series_detail",
    ),
    path(
        "history/<int:host_id>/<str:config_hash>/<str:profile_key>/pin/",
        flags.pin_baseline,
        name="pin_baseline",
    ),
    path("tokens/", tokens.token_list, name="token_list"),
    path("tokens/new/", tokens.create_token, name="create_token"),
    path("tokens/<int:token_id>/revoke/", tokens.revoke_token, name="revoke_token"),
    path("team/", team.user_list, name="user_list"),
    path("team/<int:user_id>/role/", team.set_role, name="set_role"),
    path("audit/", team.audit_log, name="audit_log"),
]
