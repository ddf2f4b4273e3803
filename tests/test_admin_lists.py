"""Every admin page a superuser and a tenant's staff reach from the admin's index fits a
1400 x 900 screen in a real browser (Playwright driving Debian's chromium): with the
navigation and the filters beside it, a list's columns are all in view, none behind a
sideways scroll, over long Chinese and English names and many rows. The tool invocations'
list showed 3 of its 11 columns; the sources', documents' and chunks' lists cut theirs."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

pytestmark = pytest.mark.embedded

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREEN = {"width": 1400, "height": 900}
PASSWORD = "pw-of-the-layout-test"
TITLES = [
    "Redis 内存满了怎么办：maxmemory-policy 驱逐策略、大 key 排查与 RDB/AOF 持久化调优完整手册",
    "Nginx 502 Bad Gateway when the upstream keepalive pool is exhausted under heavy load",
    "JVM CPU 飙高：线程 dump 分析、GC 日志、火焰图与 async-profiler 的使用",
    "Kafka consumer lag grows without bound after a rebalance storm: partition assignment",
    "Kubernetes pod CrashLoopBackOff: liveness probes, OOMKilled containers, init containers",
    "证书过期导致的 TLS 握手失败：cert-manager 自动续期与告警配置的排查步骤",
]
# What a list's columns must not do: reach past the screen or past the box the list scrolls
# in; the page itself must not scroll sideways either.
MEASURE = """() => {
  const cut = [];
  const table = document.querySelector('#result_list');
  if (table) {
    const edge = Math.min(innerWidth, table.parentElement.getBoundingClientRect().right);
    for (const th of table.querySelectorAll('thead th'))
      if (th.getBoundingClientRect().right > edge + 1) cut.push(th.innerText.trim());
  }
  return {cut, rows: table ? table.querySelectorAll('tbody tr').length : 0,
          sideways: document.documentElement.scrollWidth - innerWidth};
}"""


def _world() -> tuple[User, User]:
    """Three tenants with long names, each with what every list shows; a superuser and the
    staff of two of the tenants."""
    from audit.models import InvocationDataset, ToolInvocation
    from datasets.models import Chunk, Dataset, Document, Job, Source, Tenant
    from datasets.tenancy.keys import api_key_create
    from evaluation.models import EvaluationRun, QuestionSet
    from retrieval.index.models import IndexVersion
    from retrieval.ragconfig.drafts import experiment_start
    from retrieval.ragconfig.models import RagAgent, RagConfigDraft
    from retrieval.ragconfig.services import experiment_stop, rag_config_update
    from retrieval.ragconfig.synonyms import synonym_group_save

    now = timezone.now()
    root = User.objects.create_superuser("root", "root@example.org", PASSWORD)
    staff = User.objects.create_user("ops-staff", "ops@example.org", PASSWORD, is_staff=True)
    staff.user_permissions.set(Permission.objects.filter(content_type__app_label__in=[
        "datasets", "audit", "retrieval", "evaluation"]))
    tenants = [Tenant.objects.create(slug=slug, name=name) for slug, name in [
        ("acme-payments-platform-operations", "ACME 支付平台 运维与值班手册 (payments operations)"),
        ("globex-site-reliability-engineering", "Globex SRE"), ("initech", "Initech 初创科技")]]
    for tenant in tenants[:2]:
        tenant.staff.add(staff)
    for t, tenant in enumerate(tenants):
        datasets = [Dataset.objects.create(tenant=tenant, name=name, kb_scope=f"scope-{name}")
                    for name in ("runbooks-production-oncall-2025",
                                 "architecture-decision-records-and-postmortems")]
        for n in range(24):
            dataset, title = datasets[n % 2], TITLES[n % len(TITLES)]
            path = f"runbooks/team-{n % 3}/a-long-folder-of-the-platform-team/{n}-{title[:24]}.md"
            document = Document.objects.create(
                dataset=dataset, source_path=path, file_name=path.rsplit("/", 1)[-1],
                title=title, category="平台运维-platform-operations", content_hash=f"{n:064x}",
                status=["ready", "failed", "indexing", "pending"][n % 4], chunk_count=n,
                activated=n % 5 != 0, source_text=f"# {title}\n\nbody")
            if n < 4:
                Chunk.objects.bulk_create(
                    Chunk(document=document, chunk_index=c, breadcrumb=f"{title} > 排查 > {c}",
                          content="检查 maxmemory 设置，确认驱逐策略为 allkeys-lru。" * 8)
                    for c in range(5))
            Job.objects.create(kind=Job.Kind.INDEX_DOCUMENT, status=Job.Status.FAILED,
                               tenant=tenant, dataset=dataset, document=document, done=n, total=24,
                               error="the converter ran out of time")
        for n, (kind, location) in enumerate([
                ("git", "https://git.example.com/platform-engineering/operations-handbook.git"),
                ("folder", "/srv/knowledge/shared-drive/运维文档/production-runbooks/2025"),
                ("web", "https://docs.example.com/engineering/handbook/operations/index.html")]):
            Source.objects.create(dataset=datasets[0], name=f"engineering-handbook-{n}", kind=kind,
                                  location=location, last_status="failed", interval_minutes=90,
                                  last_revision="9f1c2ab3d4e5f60718293a4b5c6d7e8f90a1b2c3",
                                  last_sync_at=now, last_error="could not connect")
        for role in ("tool", "admin", "tool"):
            api_key_create(tenant=tenant, role=role,
                           name=f"{tenant.slug}-agent-production-{role}-key-of-the-oncall-bot")
        config = None
        for n in range(3):
            config = rag_config_update(config=config, tenant=tenant, changed_by="ops-staff",
                                       values={"return_n": 3 + n}, note="rollback to version 1: "
                                       "the nightly regression questions about payments dropped")
        rag_config_update(config=None, tenant=tenant, dataset=datasets[1], values={},
                          changed_by="root")
        assert config is not None
        experiment = experiment_start(change=config.changes.get(version=1), share=30,
                                      started_by="ops-staff")
        experiment_stop(experiment=experiment, stopped_by="root",
                        outcome="promoted: version 1 held by the gate (held change 12)")
        for status in ("held", "applied", "discarded"):
            RagConfigDraft.objects.create(
                config=config, base_version=3, settings={}, status=status,
                proposed_by="a-staff-member-with-a-long-name",
                applied_version=4 if status == "applied" else None)
        RagAgent.objects.create(tenant=tenant, name="incident-commander-assistant-for-payments",
                                chat_model="qwen2.5-1.5b-instruct-q4_k_m-gguf")
        synonym_group_save(tenant=tenant, terms=["Kubernetes", "k8s", "容器编排", "kube"],
                           changed_by="root")
        QuestionSet.objects.create(tenant=tenant, dataset=datasets[0],
                                   name="值班问题集 on-call questions of the payments platform",
                                   questions=[{"query": "q"}] * 30)
        for n in range(8):
            EvaluationRun.objects.create(
                tenant=tenant, kind="batch", config_scope=f"{tenant.slug}/default",
                name=f"夜间回归 nightly regression questions — payments on-call set {n}",
                config_version=1 + n % 3, settings={}, queries=120, finished_at=now,
                metrics={"hit_rate": 0.9, "ndcg@10": 0.7})
        for n in range(60):
            outcome = ["ok", "empty", "unavailable", "forbidden"][n % 4]
            call = ToolInvocation.objects.create(
                created_at=now - timedelta(minutes=n + 60 * t),
                tool_call_id=f"toolu_01{hashlib.sha256(bytes([t, n])).hexdigest()[:24]}",
                session_id=f"session-{hashlib.md5(bytes([n])).hexdigest()}", tenant=tenant,
                tool_name=["lookup_knowledge", "evidence_guard", "rate_evidence"][n % 3],
                channel=["rest", "mcp"][n % 2], outcome=outcome,
                evidence_status={"ok": "READY", "empty": "EMPTY"}.get(outcome, ""),
                relevance_level={"ok": "REFERENCE", "empty": "NONE"}.get(outcome, ""),
                returned_count=5 if outcome == "ok" else 0, latency_ms=1234.5,
                error="the Milvus server did not answer in time" if n % 4 == 2 else "",
                dataset_ids=[d.pk for d in datasets])
            for dataset in datasets:
                InvocationDataset.of(call, dataset.pk).save()
    for n, status in enumerate(["active", "retired", "failed"]):
        IndexVersion.objects.create(
            collection_name=f"biz_v{n + 1}_multilingual_e5_small_384_2025_06", dimension=384,
            embedder="sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2",
            chunk_size=800, chunk_overlap=100, status=status, activated_at=now)
    return root, staff


@pytest.fixture
def users(transactional_db: None) -> tuple[User, User]:
    return _world()


@pytest.fixture
def browser(users: tuple[User, User]) -> Iterator[Any]:
    """Chromium, started once the world is written: Playwright's event loop in this thread
    would refuse the ORM's queries."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("no chromium: `bash scripts/system-packages.sh chromium fonts-wqy-zenhei`")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield launched
        launched.close()


def test_every_admin_page_fits_a_1400_px_screen(live_server: Any, users: tuple[User, User],
                                                browser: Any, tmp_path: Path) -> None:
    misfits: dict[str, Any] = {}
    lists = 0
    for user in users:
        page = browser.new_page(viewport=SCREEN)
        page.goto(f"{live_server.url}/admin/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_selector("#site-name")
        links = page.eval_on_selector_all("#content-main th[scope=row] a",
                                          "links => links.map(a => a.getAttribute('href'))")
        assert len(links) > 15, links
        for href in links:
            response = page.goto(live_server.url + href)
            assert response is not None and response.status == 200, (user.username, href)
            seen = page.evaluate(MEASURE)
            lists += seen["rows"] > 0
            if seen["cut"] or seen["sideways"] > 0:
                misfits[f"{user.username} {href}"] = seen
                page.screenshot(path=str(tmp_path / f"{user.username}-{len(misfits)}.png"))
        page.close()
    assert not misfits, misfits
    assert lists > 25  # the lists had rows: a list without any fits by itself


def test_the_tool_invocations_say_at_a_glance_what_each_call_was_and_how_it_ended(
        live_server: Any, browser: Any) -> None:
    page = browser.new_page(viewport=SCREEN)
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "ops-staff")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.goto(f"{live_server.url}/admin/audit/toolinvocation/?outcome__exact=unavailable")
    headers = [h.strip() for h in page.locator("#result_list thead th").all_inner_texts()]
    assert headers == ["TIME", "TOOL", "OUTCOME", "RELEVANCE", "LATENCY", "TENANT · DATASETS"]
    row = page.locator("#result_list tbody tr").first
    for cell in row.locator("th, td").all():
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= SCREEN["width"]
    text = row.inner_text()
    for shown in ("rate_evidence", "REST API", "unavailable", "the Milvus server", "1,234 ms",
                  "acme-payments-platform", "runbooks-production-oncall-2025"):
        assert shown in text, shown
    # The call's ids are the time's tooltip; the search finds a call by either.
    title = row.locator("th span").first.get_attribute("title") or ""
    assert title.startswith("call toolu_01") and " · session session-" in title
