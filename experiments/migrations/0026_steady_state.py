# Steady-state throughput and acceptance of each benchmark cell (the longest stretch with the concurrency held).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0025_profile_traces'),
    ]

    operations = [
        migrations.AddField(
            model_name='measurement',
            name='steady_state_output_throughput',
            field=models.FloatField(blank=True, help_text='Output tok/s over the steady-state window.', null=True),
        ),
        migrations.AddField(
            model_name='measurement',
            name='steady_state_window_s',
            field=models.FloatField(blank=True, help_text="The steady-state window's length (s).", null=True),
        ),
        migrations.AddField(
            model_name='measurement',
            name='steady_state_accept_length',
            field=models.FloatField(blank=True, help_text='Output tokens per verify step over the steady-state window.', null=True),
        ),
    ]
