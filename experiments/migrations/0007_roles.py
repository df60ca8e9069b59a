from django.contrib.auth.management import create_permissions
from django.db import migrations

from experiments import roles


def sync_roles(apps, schema_editor):
    # Permissions are normally created after all migrations ran; the groups need them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    roles.sync_role_groups(apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"))


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0006_ssh_keys_audit"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(sync_roles, migrations.RunPython.noop)]
