# Per-position acceptance of each benchmark cell. 0023 is another branch's; Django allows the gap.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0023_audit_kinds'),
    ]

    operations = [
        migrations.AddField(
            model_name='measurement',
            name='accepted_drafts_histogram',
            field=models.JSONField(blank=True, help_text="Index i: the cell's verify steps that accepted exactly i drafts.", null=True),
        ),
        migrations.AddField(
            model_name='measurement',
            name='position_acceptance',
            field=models.JSONField(blank=True, help_text='Position j (from 1): the share of verify steps that accepted >= j drafts.', null=True),
        ),
        migrations.AddField(
            model_name='measurement',
            name='position_acceptance_by_category',
            field=models.JSONField(blank=True, help_text='Per prompt category: {accepted_drafts_histogram, position_acceptance}.', null=True),
        ),
    ]
