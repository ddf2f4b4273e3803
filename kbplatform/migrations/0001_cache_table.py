"""The cache table of a deployment without Redis (CACHES: Django's database cache), made by
`migrate` like every other table. Before, only the demo ran `createcachetable`: a process
started on a database only migrated had no cache, so its health check failed and canonical
records and query vectors were not kept. Nothing is made where the cache is Redis."""

from typing import Any

from django.core.management import call_command
from django.db import migrations


def create_cache_table(apps: Any, schema_editor: Any) -> None:
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):
    dependencies: list[tuple[str, str]] = []
    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop)]
