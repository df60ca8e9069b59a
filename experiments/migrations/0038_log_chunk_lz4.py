from django.db import migrations


def _compress_with_lz4(apps, schema_editor):
    """A flood's chunks are 2 MB each; pglz compressed them at a fraction of the wire's speed, lz4 several times
    faster (PostgreSQL 14+ built with lz4; elsewhere the column keeps the server's default)."""
    connection = schema_editor.connection
    if connection.vendor != "postgresql" or connection.pg_version < 140000:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
        )
        if cursor.fetchone() is None:
            return
        cursor.execute("ALTER TABLE experiments_logchunk ALTER COLUMN text SET COMPRESSION lz4")


def _compress_as_before(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql" and connection.pg_version >= 140000:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE experiments_logchunk ALTER COLUMN text SET COMPRESSION default")


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0037_server_metric_samples_by_id'),
    ]

    operations = [
        migrations.RunPython(_compress_with_lz4, _compress_as_before),
    ]
