"""The `operators` group: its members (and staff) see and act on every session."""
from django.db import migrations

OPERATORS_GROUP = "operators"  # sessions.principal.OPERATORS_GROUP, frozen here as migrations are


def create_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.using(schema_editor.connection.alias).get_or_create(name=OPERATORS_GROUP)


def remove_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.using(schema_editor.connection.alias).filter(name=OPERATORS_GROUP).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("agent_sessions", "0010_personal_token"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(create_group, remove_group)]
