from django.db import migrations

from experiments import roles


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0006_ssh_keys_audit"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(roles.sync_roles_in_migration, migrations.RunPython.noop)]
