"""ToolInvocation.dataset_ids: the datasets a call searched as a field of its own, filled for
the calls already kept from their traces' filters."""

from django.db import migrations, models

BATCH = 1000


def searched(details):
    filters = ((details or {}).get("retrievalDetails") or {}).get("filters") or {}
    return sorted({int(pk) for pk in filters.get("datasets") or []})


def backfill(apps, schema_editor):
    calls = apps.get_model("audit", "ToolInvocation")
    last = 0
    while batch := list(calls.objects.filter(pk__gt=last).order_by("pk")
                        .only("pk", "details")[:BATCH]):
        last = batch[-1].pk
        for row in batch:
            row.dataset_ids = searched(row.details)
        calls.objects.bulk_update([row for row in batch if row.dataset_ids], ["dataset_ids"])


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0006_invocation_dataset_day'),
    ]

    operations = [
        migrations.AddField(
            model_name='toolinvocation',
            name='dataset_ids',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
