# The host's OOM killer gets its own failure kind (issue 17): host memory, not GPU memory.
# Depends on 0008_host_model_inventory (written concurrently from 0007_roles) so the graph keeps one leaf.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0008_host_model_inventory"),
    ]

    operations = [
        migrations.AlterField(
            model_name="run",
            name="failure_kind",
            field=models.CharField(
                blank=True,
                choices=[
                    ("ssh", "Ssh"),
                    ("preflight", "Preflight"),
                    ("crashed", "Crashed"),
                    ("oom", "Oom"),
                    ("host_oom", "Host out of memory"),
                    ("context_length", "Context Length"),
                    ("zombie", "Zombie"),
                    ("readiness_timeout", "Readiness Timeout"),
                    ("misconfigured", "Misconfigured"),
                    ("env_not_propagated", "Env Not Propagated"),
                    ("smoke_failed", "Smoke Failed"),
                    ("benchmark_failed", "Benchmark Failed"),
                    ("teardown_incomplete", "Teardown Incomplete"),
                    ("internal", "Internal"),
                ],
                max_length=32,
            ),
        ),
    ]
