# The evaluation runs' tables, created by the retrieval app (its 0013-0015), taken over in the
# state only; their content types (permissions, admin log) move with them.

import django.db.models.deletion
from django.db import migrations, models


MODELS = ["evaluationrun", "evaluationquery"]


def _move(apps, source, target):
    content_type = apps.get_model("contenttypes", "ContentType")
    if content_type.objects.filter(app_label=target, model__in=MODELS).exists():
        return  # created already (post_migrate of an earlier run): nothing to carry over
    content_type.objects.filter(app_label=source, model__in=MODELS).update(app_label=target)


def content_types_moved(apps, schema_editor):
    _move(apps, "retrieval", "evaluation")


def content_types_back(apps, schema_editor):
    _move(apps, "evaluation", "retrieval")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('datasets', '0010_api_key_created_by'),
        ('retrieval', '0016_evaluation_models_moved'),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
        migrations.CreateModel(
            name='EvaluationRun',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('batch', 'batch hit test'), ('suite', 'BEIR suite')], max_length=5)),
                ('name', models.CharField(help_text="The question set (its file's name) or the suite: the runs of one name form a series in the chart.", max_length=200)),
                ('config_scope', models.CharField(blank=True, help_text='The config that ran ("acme/default", "acme/runbooks": a dataset\'s own); empty: the built-in defaults (no config served).', max_length=200)),
                ('config_version', models.PositiveIntegerField(blank=True, help_text="That config's version; empty: the built-in defaults.", null=True)),
                ('settings', models.JSONField(help_text='Every setting the run looked up with.')),
                ('dataset_ids', models.JSONField(blank=True, default=list, help_text='A batch: the datasets its lookups searched.')),
                ('questions', models.JSONField(blank=True, default=list, help_text='A batch: its questions, as parsed.')),
                ('max_queries', models.PositiveIntegerField(blank=True, help_text='A suite: its first N judged queries.', null=True)),
                ('collection', models.CharField(blank=True, help_text='The Milvus collection searched.', max_length=200)),
                ('embedder', models.CharField(blank=True, max_length=200)),
                ('queries', models.PositiveIntegerField(default=0)),
                ('metrics', models.JSONField(blank=True, default=dict)),
                ('latency_ms', models.JSONField(blank=True, default=dict)),
                ('created_by', models.CharField(blank=True, max_length=150)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('job', models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='evaluation_run', to='datasets.job')),
                ('tenant', models.ForeignKey(help_text='Whose config version ran.', on_delete=django.db.models.deletion.CASCADE, related_name='evaluation_runs', to='datasets.tenant')),
            ],
            options={
                'db_table': 'retrieval_evaluationrun',
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='EvaluationQuery',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('position', models.PositiveIntegerField()),
                ('query_id', models.CharField(max_length=200)),
                ('query', models.TextField()),
                ('expected', models.JSONField(blank=True, default=list, help_text='The relevant documents; empty: off-topic, EMPTY is right.')),
                ('ranking', models.JSONField(blank=True, default=list, help_text='The documents found, best first (the first ten).')),
                ('status', models.CharField(help_text='READY or EMPTY.', max_length=16)),
                ('hit', models.BooleanField()),
                ('reciprocal_rank', models.FloatField()),
                ('ndcg', models.FloatField(help_text='nDCG@10')),
                ('latency_ms', models.FloatField()),
                ('trace', models.JSONField(blank=True, help_text="A miss's retrievalDetails (the first misses of a run).", null=True)),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='results', to='evaluation.evaluationrun')),
            ],
            options={
                'db_table': 'retrieval_evaluationquery',
                'ordering': ['run', 'position'],
            },
        ),
        migrations.AddIndex(
            model_name='evaluationrun',
            index=models.Index(fields=['tenant', 'name', 'created_at'], name='evaluation_run_series'),
        ),
        migrations.AddConstraint(
            model_name='evaluationrun',
            constraint=models.CheckConstraint(condition=models.Q(('kind__in', ['batch', 'suite'])), name='evaluation_run_kind_valid'),
        ),
        migrations.AddConstraint(
            model_name='evaluationquery',
            constraint=models.UniqueConstraint(fields=('run', 'position'), name='evaluation_query_unique_position'),
        ),
        ], database_operations=[]),
        migrations.RunPython(content_types_moved, content_types_back),
    ]
