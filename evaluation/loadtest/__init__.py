"""A bounded load test on 127.0.0.1 (`manage.py load_test`, docs/reliability.md "Load test").

What a deployment runs is started on free ports — Milvus (2.5's engine), one indexing worker,
gunicorn with threads, and a Redis of its own as the Celery broker — pointed at this
process's database and cache (`deployment`). N agents then look up while one mutator uploads,
deactivates, reactivates and deletes documents through the HTTP API (`client`, `fleet`,
`run`), and every answer is checked against what each key may read and what was switched off
during the request (`ledger`): no evidence of another tenant or of a dataset outside the
key's scope, none of a document that was switched off for the whole time of the request.
The numbers and the verdict are the `report`.
"""


class LoadTestError(Exception):
    """The load test could not run (a service did not start, setup failed)."""
