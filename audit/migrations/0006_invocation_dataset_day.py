"""InvocationDataset.day: the call's local date, so that the datasets at a glance count per
day from an index alone (no date function per row)."""

from django.db import migrations, models
from django.utils import timezone

BATCH = 2000


def backfill(apps, schema_editor):
    rows = apps.get_model("audit", "InvocationDataset")
    pending = rows.objects.filter(day__isnull=True).order_by("pk")
    while batch := list(pending.only("pk", "created_at")[:BATCH]):
        for row in batch:
            row.day = timezone.localtime(row.created_at).date()
        rows.objects.bulk_update(batch, ["day"])


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0005_invocation_experiment'),
    ]

    operations = [
        migrations.AddField(
            model_name='invocationdataset',
            name='day',
            field=models.DateField(null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='invocationdataset',
            name='day',
            field=models.DateField(),
        ),
        migrations.RemoveIndex(
            model_name='invocationdataset',
            name='inv_dataset_created',
        ),
        migrations.AddIndex(
            model_name='invocationdataset',
            index=models.Index(fields=['dataset', 'day', 'outcome'], name='inv_dataset_day'),
        ),
    ]
