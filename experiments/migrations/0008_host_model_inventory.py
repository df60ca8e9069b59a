from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0007_roles"),
    ]

    operations = [
        migrations.AddField(
            model_name="host",
            name="model_inventory",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="host",
            name="model_inventory_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
