# A config's new version made by a remedy links to the config it changes and to the failed run it answers (issue 17);
# the audit log records the remedy. Follows 0010_experiment_schedule_queue (written concurrently).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0010_experiment_schedule_queue"),
    ]

    operations = [
        migrations.AddField(
            model_name="serverconfig",
            name="derived_from",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="versions",
                to="experiments.serverconfig",
            ),
        ),
        migrations.AddField(
            model_name="serverconfig",
            name="remedy_for_run",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="remedy_configs",
                to="experiments.run",
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="action",
            field=models.CharField(
                choices=[
                    ("experiment.submit", "Submit"),
                    ("experiment.rerun", "Rerun"),
                    ("experiment.schedule", "Schedule"),
                    ("run.cancel", "Cancel"),
                    ("run.remedy", "Remedy"),
                    ("baseline.pin", "Pin"),
                    ("flag.triage", "Triage"),
                    ("config.create", "Config Create"),
                    ("profile.create", "Profile Create"),
                    ("host.create", "Host Create"),
                    ("host.edit", "Host Edit"),
                    ("host.test", "Host Test"),
                    ("host.clean", "Host Clean"),
                    ("key.create", "Key Create"),
                    ("key.edit", "Key Edit"),
                    ("key.delete", "Key Delete"),
                    ("user.roles", "Roles"),
                    ("token.create", "Token Create"),
                    ("token.revoke", "Token Revoke"),
                ],
                max_length=32,
            ),
        ),
    ]
