"""`manage.py bench_admin_pages`: every page of the console answers over a seeded audit (the
figures themselves are measured in docs/benchmarks.md, not asserted), and what it added goes."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from audit.models import ToolInvocation
from datasets.models import Tenant
from evaluation.admin_bench import BENCH_TENANT
from evaluation.models import EvaluationRun
from tests.conftest import BOTH_RUNTIMES

pytestmark = pytest.mark.django_db


@BOTH_RUNTIMES
def test_every_page_answers_over_the_bench_audit_and_nothing_is_left(runtime: str) -> None:
    out = StringIO()
    call_command("bench_admin_pages", "--rows", "300", "--rounds", "1", "--json", stdout=out)
    report = json.loads(out.getvalue())
    pages = {page["page"]: page for page in report["pages"]}
    assert {"datasets at a glance", "an A/B test over every call", "two runs compared",
            "tool invocations, page 2"} <= set(pages)
    assert all(page["queries"] <= 10 for page in pages.values()), pages
    assert not Tenant.objects.filter(slug=BENCH_TENANT).exists()
    assert not ToolInvocation.objects.exists() and not EvaluationRun.objects.exists()
