from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0036_run_host_state_finished"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="servermetricsample",
            index=models.Index(fields=["run", "id"], name="server_metric_samples_by_id"),
        ),
    ]
