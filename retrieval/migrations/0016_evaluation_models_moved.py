# Evaluation runs moved to the evaluation app, which takes their tables over (state only).

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('retrieval', '0015_agentic_settings_and_evaluated_config'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name='evaluationrun', name='job'),
                migrations.RemoveField(model_name='evaluationrun', name='tenant'),
                migrations.DeleteModel(name='EvaluationQuery'),
                migrations.DeleteModel(name='EvaluationRun'),
            ],
            database_operations=[],
        ),
    ]
