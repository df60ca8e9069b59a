from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0043_audit_team_actions"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="imported_sha256",
            field=models.CharField(blank=True, db_index=True, default="", editable=False, max_length=64),
        ),
    ]
