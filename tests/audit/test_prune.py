"""Retention: prune_tool_invocations deletes old rows in batches and says how many."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit.models import ToolInvocation

pytestmark = pytest.mark.django_db


def rows_aged(*days: int) -> list[int]:
    now = timezone.now()
    return [ToolInvocation.objects.create(outcome="ok", latency_ms=1.0, tool_call_id=f"c{i}",
                                          created_at=now - timedelta(days=age)).pk
            for i, age in enumerate(days)]


def test_deletes_only_rows_older_than_n_days_in_batches() -> None:
    recent = rows_aged(0, 29)
    rows_aged(31, 45, 90, 400, 1000)
    out = StringIO()
    call_command("prune_tool_invocations", "--days", "30", "--batch-size", "2", stdout=out)
    assert "Deleted 5 tool invocation(s) older than 30 day(s)." in out.getvalue()
    assert sorted(ToolInvocation.objects.values_list("pk", flat=True)) == sorted(recent)

    out = StringIO()
    call_command("prune_tool_invocations", "--days", "30", stdout=out)
    assert "Deleted 0 tool invocation(s)" in out.getvalue()


@pytest.mark.parametrize("args", [["--days", "0"], ["--days", "7", "--batch-size", "0"]])
def test_refuses_arguments_that_would_empty_the_table_or_loop(args: list[str]) -> None:
    rows_aged(10)
    with pytest.raises(CommandError):
        call_command("prune_tool_invocations", *args)
    assert ToolInvocation.objects.count() == 1
