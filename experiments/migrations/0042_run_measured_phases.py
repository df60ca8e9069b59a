"""A run's measured phases (what the estimates learn from) and its GPU-hour reservation. The runs a worker already
drove to success get their phases from their timelines and cells' ends, so a host keeps what it has learnt; a run
seeded by the demo or imported (no worker) stays unmeasured."""

from django.db import migrations, models

BATCH = 500


def measure_past_runs(apps, schema_editor):
    from experiments.analysis.launch_estimates import Cell, measured_phases

    Run = apps.get_model("experiments", "Run")
    Measurement = apps.get_model("experiments", "Measurement")
    past = (
        Run.objects.filter(state="succeeded", imported_from__isnull=True, measured_phases__isnull=True)
        .exclude(worker="")
        .select_related("experiment__profile")
        .only("timeline", "profile_requested", "experiment__profile")
    )
    changed = []
    for run in past.iterator(chunk_size=BATCH):
        profile = run.experiment.profile
        order = [(p, int(c)) for p in range(profile.passes) for c in profile.concurrency or ()]
        ends = dict(
            ((m_pass, m_c), ended)
            for m_pass, m_c, ended in Measurement.objects.filter(run_id=run.pk).values_list(
                "pass_index", "concurrency", "ended_at"
            )
        )
        cells = [Cell(c, profile.num_prompts, profile.output_len) for _, c in order]
        run.measured_phases = measured_phases(run.timeline or [], [ends.get(key) for key in order], cells,
                                              run.profile_requested)  # fmt: skip
        if run.measured_phases is not None:
            changed.append(run)
        if len(changed) >= BATCH:
            Run.objects.bulk_update(changed, ["measured_phases"])
            changed = []
    Run.objects.bulk_update(changed, ["measured_phases"])


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0041_quota_refusals"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="measured_phases",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="reserved_s",
            field=models.FloatField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(measure_past_runs, migrations.RunPython.noop),
    ]
