from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0027_imported_runs"),
    ]

    operations = [
        migrations.AddField(
            model_name="measurement",
            name="requests",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="measurement",
            name="ended_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
