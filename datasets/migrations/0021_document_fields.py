from django.db import migrations, models

import datasets.models


def fill_fields(apps, schema_editor):
    """Documents stored before: their other frontmatter fields, read as indexing reads them
    (the frontmatter alone)."""
    from datasets.ingestion.parse import frontmatter_fields

    document = apps.get_model("datasets", "Document")
    rows = (document.objects.filter(format="md", source_text__startswith="---")
            .only("pk", "source_text"))
    for row in rows.iterator(chunk_size=200):
        try:
            fields = frontmatter_fields(row.source_text)
        except Exception:  # noqa: BLE001 - its next indexing says why, as before
            continue
        if fields:
            document.objects.filter(pk=row.pk).update(
                fields={name: list(values) for name, values in fields.items()})
    # No view of any dataset needs renewing: none keeps a field before a tenant declares it.


class Migration(migrations.Migration):

    dependencies = [
        ('datasets', '0020_document_validity'),
    ]

    operations = [
        migrations.AddField(
            model_name='document',
            name='fields',
            field=models.JSONField(blank=True, db_default={}, default=dict, editable=False, help_text='Frontmatter: its other fields, {name: [values as text]}; the tenant\'s filterable fields are read from them.'),
        ),
        migrations.AddField(
            model_name='tenant',
            name='filterable_fields',
            field=models.JSONField(blank=True, db_default=[], default=list, help_text='Frontmatter fields of this tenant\'s documents an agent\'s call may filter on, as `filters: {"fields": {"team": ["sre"]}}` (docs/api.md).', validators=[datasets.models.validate_filterable_fields]),
        ),
        migrations.RunPython(fill_fields, migrations.RunPython.noop),
    ]
