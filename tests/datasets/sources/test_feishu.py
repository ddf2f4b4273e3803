"""A Feishu wiki space or Drive folder as a source, against a local server speaking the open
platform's API (tests/datasets/sources/feishu_server.py): the nodes listed whole, a
document's blocks read only when its edit time moved, its place in the space as its path, its
blocks written out as markdown, the app's token renewed before it expires, deletion only after
a complete listing, failures the owner can act on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from datasets.models import Document, Job, Source
from datasets.sources.feishu import blocks_markdown, place_of
from datasets.sources.http import ATTEMPTS
from datasets.sources.services import InvalidSource
from tests.datasets.sources.builders import live_paths, make_source, sync, sync_counts, timed_sync
from tests.datasets.sources.feishu_server import FeishuDoc, Platform, blocks_of, feishu_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]

APP_ID, APP_SECRET = "cli_a1b2c3d4e5f6", "feishu-app-secret-0123456789abcdef"
VARIABLE = "KB_SOURCE_SECRET_ACME_FEISHU"  # the kb fixture's tenant is acme


def _steps(n: str) -> list[tuple[str, str]]:
    return [("h1", "步骤"), ("p", f"服务 {n} 告警时先看日志。"), ("bullet", "确认告警来源")]


@pytest.fixture
def platform(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Platform]:
    """A space of 200 documents: 10 section documents with 19 documents under each, a sheet
    and a shortcut beside them."""
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, f"{APP_ID}:{APP_SECRET}")
    site = Platform(app_id=APP_ID, app_secret=APP_SECRET)
    for section in range(10):
        site.nodes[f"wikS{section}"] = FeishuDoc(f"领域 {section}", _steps(f"{section}"))
        for n in range(19):
            site.nodes[f"wik{section}x{n}"] = FeishuDoc(
                f"服务 {section}-{n}", _steps(f"{section}-{n}"), parent=f"wikS{section}")
    site.nodes["wikSheet"] = FeishuDoc("值班表", kind="sheet")
    site.nodes["wikLink"] = FeishuDoc("服务 0-1", _steps("link"), shortcut=True)
    with feishu_server(site) as running:
        yield running


def _source(kb: Any, platform: Platform, **fields: Any) -> Source:
    return make_source(kb.dataset, kind="feishu", location=platform.space_url,
                       **{"secret_env": VARIABLE, **fields})


def test_a_space_syncs_its_documents_and_then_only_those_that_changed(
        kb: Any, store: Any, platform: Platform) -> None:
    platform.expire = 4  # the token is renewed during the sync, at half its life
    source = _source(kb, platform)
    seconds = []
    job = timed_sync(source, seconds)
    assert job.status == Job.Status.SUCCEEDED, job.log
    assert sync_counts(job) == (200, 0, 0, 0, 0)  # the sheet and the shortcut left out
    assert len(platform.issued) > 1 and not any(
        status == 400 for _, status in platform.hits)
    doc = Document.objects.get(source=source, source_path="src/领域 3/服务 3-4.md")
    assert doc.title == "服务 3-4" and doc.url == f"{platform.url}/wiki/wik3x4"
    assert "src/领域 3.md" in live_paths(source)

    platform.expire = 7200
    platform.hits.clear()
    job = timed_sync(source, seconds)
    assert sync_counts(job) == (0, 0, 200, 0, 0) and platform.bodies_read() == []

    platform.nodes["wik3x4"] = FeishuDoc("服务 3-4", [("p", "先摘除节点。")], parent="wikS3",
                                         edited="1764662400")
    del platform.nodes["wik3x5"]
    platform.nodes["wikNew"] = FeishuDoc("重启部署", [("h1", "步骤"),
                                                   ("code", "kubectl rollout restart")])
    platform.hits.clear()
    job = timed_sync(source, seconds)
    print("feishu source, 200 documents (docs/benchmarks.md): first sync, nothing changed, "
          "one added + one changed + one deleted:", " / ".join(f"{s:.2f} s" for s in seconds))
    assert sync_counts(job) == (1, 1, 198, 1, 0)
    assert sorted(platform.bodies_read()) == ["doxwik3x4", "doxwikNew"]
    found = kb.tool.post("/api/tools/lookup_knowledge",
                         {"query": "kubectl rollout restart 重启部署"}, format="json").json()
    assert found["evidence"][0]["url"] == f"{platform.url}/wiki/wikNew"


def test_a_private_spaces_members_are_its_documents_readers(
        kb: Any, store: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, f"{APP_ID}:{APP_SECRET}")
    site = Platform(app_id=APP_ID, app_secret=APP_SECRET, visibility="private", members=[
        {"member_type": "userid", "member_id": "ou_alice", "member_role": "admin",
         "type": "user"},
        {"member_type": "opendepartmentid", "member_id": "od-sre", "member_role": "member",
         "type": "user"},
        {"member_type": "groupid", "member_id": "g_dba", "member_role": "member",
         "type": "group"},
        *({"member_type": "openchat", "member_id": f"oc_{n}", "member_role": "member",
           "type": "user"} for n in range(30))])  # two pages of members
    site.nodes["wikA"] = FeishuDoc("扩容", _steps("a"))
    with feishu_server(site) as running:
        source = _source(kb, running)
        assert sync(source).status == Job.Status.SUCCEEDED

        def readers() -> list[list[str]]:
            return [d.readers for d in Document.objects.filter(source=source, deleted=False)]

        expected = sorted(["user:ou_alice", "group:od-sre", "group:g_dba",
                           *(f"group:oc_{n}" for n in range(30))])
        assert readers() == [expected]
        # A member removed at the source: one sync, and the document's readers follow.
        del site.members[0]
        job = sync(source)
        assert sync_counts(job) == (0, 1, 0, 0, 0)
        assert readers() == [[r for r in expected if r != "user:ou_alice"]]
        # A member of a kind no reader can say: no agent reads it; made public: everyone.
        site.members.append({"member_type": "robot", "member_id": "x", "type": "user"})
        sync(source)
        assert readers() == [["none:"]]
        site.visibility = "public"
        assert sync_counts(sync(source)) == (0, 1, 0, 0, 0) and readers() == [[]]
        assert not any("/members" in hit for hit, _ in running.hits[-4:])


def test_failures_delete_nothing(kb: Any, store: Any, platform: Platform,
                                 monkeypatch: pytest.MonkeyPatch, capfd: Any,
                                 caplog: Any) -> None:
    source = _source(kb, platform)
    assert sync(source).status == Job.Status.SUCCEEDED
    del platform.nodes["wik1x1"]
    platform.faults["parent_node_token=wikS4"] = [500] * ATTEMPTS
    job = sync(source)
    assert job.error == "Feishu answered 500 (code 1)"
    platform.member = False
    job = sync(source)
    assert job.error == (f"no wiki space {platform.space_id} visible to the app in {VARIABLE}: "
                         "add the app to the space's members")
    platform.member = True
    platform.nodes["wik?page_size=1"] = FeishuDoc("坏的节点")  # a token no URL path carries
    assert sync(source).error == "Feishu's listing gives an entry no node_token"
    del platform.nodes["wik?page_size=1"]
    platform.scopes = False
    assert sync(source).error.startswith(f"the app in {VARIABLE} lacks a scope this source "
                                         "needs: wiki:wiki:readonly")
    platform.scopes = True
    monkeypatch.setenv(VARIABLE, f"{APP_ID}:wrong-secret")
    job = sync(source)
    assert job.error == f"Feishu refused the app credential in {VARIABLE}"
    source.refresh_from_db()
    kept = [job.error, str(job.log), source.last_error, capfd.readouterr().err, caplog.text]
    assert not any("wrong-secret" in text or APP_SECRET in text for text in kept)
    assert len(live_paths(source)) == 200

    monkeypatch.setenv(VARIABLE, f"{APP_ID}:{APP_SECRET}")
    platform.faults["/nodes?page_size=50"] = [429, 429]
    platform.nodes["wik2x2"].forbidden = True
    platform.nodes["wik2x2"].edited = "1764662400"
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED and sync_counts(job) == (0, 0, 198, 1, 1)
    assert ("failed: 领域 2/服务 2-2.md: the app may not read this document: share it with "
            "the app") in str(job.log)
    assert "src/领域 2/服务 2-2.md" in live_paths(source)


def test_a_drive_folder_syncs_with_its_sub_folders(kb: Any, store: Any,
                                                   platform: Platform) -> None:
    platform.files = {
        "fldcnDb": FeishuDoc("数据库", kind="folder"),
        "doxMysql": FeishuDoc("MySQL 从库延迟", [("p", "查看 Seconds_Behind_Master。")],
                              parent="fldcnDb"),
        "doxDisk": FeishuDoc("磁盘写满", [("p", "清理 /var/log。")]),
        "shtOncall": FeishuDoc("值班表", kind="sheet"),
    }
    source = make_source(kb.dataset, kind="feishu", location=platform.folder_url,
                         secret_env=VARIABLE)
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED and sync_counts(job) == (2, 0, 0, 0, 0)
    mysql = Document.objects.get(source=source, source_path="src/数据库/MySQL 从库延迟.md")
    assert mysql.url == f"{platform.url}/docx/doxMysql"


def test_a_drive_documents_readers_are_its_owner_and_collaborators_unless_its_link_opens_it(
        kb: Any, store: Any, platform: Platform) -> None:
    def person(kind: str, key: str, who: str = "user") -> dict[str, str]:
        return {"member_type": kind, "member_id": key, "perm": "view", "type": who}

    platform.files = {
        "doxOpen": FeishuDoc("磁盘写满", [("p", "清理 /var/log。")]),  # the tenant reads it
        "doxShared": FeishuDoc("MySQL 从库延迟", [("p", "查看 Seconds_Behind_Master。")],
                               link="closed", collaborators=[
                                   person("openid", "ou_bob"), person("openchat", "oc_sre", "chat"),
                                   person("groupid", "g_dba", "group"),
                                   person("openid", "ou_owner"),  # its owner, listed too
                                   person("appid", APP_ID, "app")]),
        "doxMine": FeishuDoc("值班交接", [("p", "交接清单。")], link="closed", owner="ou_carol"),
    }
    source = make_source(kb.dataset, kind="feishu", location=platform.folder_url,
                         secret_env=VARIABLE)
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED and sync_counts(job) == (3, 0, 0, 0, 0)

    def readers() -> dict[str, list[str]]:
        return {d.title: d.readers for d in Document.objects.filter(source=source,
                                                                    deleted=False)}

    shared = ["group:g_dba", "group:oc_sre", "user:ou_bob", "user:ou_owner"]
    assert readers() == {"磁盘写满": [], "MySQL 从库延迟": shared, "值班交接": ["user:ou_carol"]}
    # Changed at the source, the bodies not: one sync, and the readers follow.
    platform.files["doxShared"].collaborators.pop(0)
    platform.files["doxOpen"].link = "closed"
    platform.files["doxMine"].link = "anyone_readable"
    platform.hits.clear()
    job = sync(source)
    assert sync_counts(job) == (0, 3, 0, 0, 0) and platform.bodies_read() == []
    assert "who may read it changed at the source" in str(job.log)
    assert readers() == {"磁盘写满": ["user:ou_owner"], "MySQL 从库延迟": shared[:2] + shared[3:],
                         "值班交接": []}
    # A collaborator of a kind no reader can say, and sharing the app may not see: no agent
    # reads the document (the second a failed line, its body not read).
    platform.files["doxShared"].collaborators.append(person("wikispaceid", "7300", "x"))
    platform.files["doxMine"].link = "tenant_editable"
    platform.refused["/doxOpen/members?"] = (403, 1063002)
    job = sync(source)
    assert sync_counts(job) == (0, 1, 1, 0, 1)
    assert ("failed: 磁盘写满.md: who may read it: the app may not see who may read this "
            "document: share it with the app with the right to share it") in str(job.log)
    assert readers() == {"磁盘写满": ["none:"], "MySQL 从库延迟": ["none:"], "值班交接": []}
    # Feishu may answer otherwise later (a server error outlasting the retries), or the app
    # lacks a scope (to ask who may read a document, to read one that changed): the sync fails
    # as a whole there, and the documents it had not reached keep the readers they had.
    del platform.refused["/doxOpen/members?"]
    platform.faults["/permissions/doxMine/public"] = [503] * ATTEMPTS
    assert sync(source).error == "Feishu answered 503 (code 1)"
    assert readers() == {"磁盘写满": ["user:ou_owner"], "MySQL 从库延迟": ["none:"], "值班交接": []}
    platform.refused["/members?"] = (400, 99991672)
    error = sync(source).error
    assert error.startswith(f"the app in {VARIABLE} lacks a scope this source needs: ")
    assert "docs:permission.member:retrieve" in error and error.endswith(
        "(Feishu: Access denied. One of the following scopes is required: [scope])")
    platform.refused = {"/blocks?": (400, 99991672)}
    platform.files["doxMine"].edited = "1764662400"
    assert sync(source).error.startswith(f"the app in {VARIABLE} lacks a scope")
    assert readers() == {"磁盘写满": ["user:ou_owner"], "MySQL 从库延迟": ["none:"], "值班交接": []}


def test_blocks_are_read_as_markdown() -> None:
    doc = FeishuDoc("Replica lag", [
        ("h1", "Check"), ("p", "Look at the lag first."), ("bullet", "SHOW REPLICA STATUS"),
        ("ordered", "stop the replica"), ("todo", "paged the owner"), ("quote", "never skip"),
        ("code", "```\nmysql -e 'SHOW REPLICA STATUS'"), ("divider", ""),
        ("table", "metric|limit;lag|30 s;io wait|5")])
    blocks = {b["block_id"]: b for b in blocks_of("doxLag", doc)}
    link = {"text_run": {"content": "the guide", "text_element_style": {
        "link": {"url": "https%3A%2F%2Fdocs.example.com%2Fguide"}}}}
    blocks["doxLag-b1"]["text"]["elements"].append(link)
    blocks["doxLag-b8-c2-0-t"]["text"]["elements"][0]["text_run"]["content"] = "io | wait"
    assert blocks_markdown("Replica lag", blocks) == "\n".join([
        "# Replica lag", "", "## Check", "",
        "Look at the lag first.[the guide](https://docs.example.com/guide)", "",
        "- SHOW REPLICA STATUS", "1. stop the replica", "- [x] paged the owner", "",
        "> never skip", "", "````", "```", "mysql -e 'SHOW REPLICA STATUS'", "````", "",
        "---", "", "| metric | limit |", "| --- | --- |", "| lag | 30 s |",
        "| io \\| wait | 5 |", ""])
    blocks["doxLag-q"] = {"block_id": "doxLag-q", "block_type": 34, "children": ["doxLag-q1"]}
    blocks["doxLag-q1"] = {"block_id": "doxLag-q1", "block_type": 2, "text": {
        "elements": [{"text_run": {"content": "quoted"}}]}}
    blocks["doxLag"]["children"].append("doxLag-q")
    assert blocks_markdown("Replica lag", blocks).endswith("| io \\| wait | 5 |\n\n> quoted\n")
    blocks["doxLag"]["children"].append("doxLag")  # a cycle ends
    assert blocks_markdown("Replica lag", blocks).count("## Check") == 1
    for block_id, block in blocks.items():  # whatever an answer holds, it is only text
        for key in list(block):
            for odd in (None, "x", 3.5, True, [], {}, [1, "doxLag"], {"elements": "x"},
                        {"elements": [{"text_run": "x"}, 7]}, {"cells": 3, "property": []}):
                assert isinstance(blocks_markdown("t", {**blocks, block_id: {
                    **block, key: odd}}), str)


def test_a_location_is_checked_when_saved(kb: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, f"{APP_ID}:{APP_SECRET}")
    for location in ("https://acme.feishu.cn/wiki/wikcnAbc", "https://acme.feishu.cn/docx/x",
                     "https://acme.feishu.cn/wiki/space/abc"):
        with pytest.raises(InvalidSource, match="the wiki space's URL"):
            make_source(kb.dataset, kind="feishu", location=location, secret_env=VARIABLE)
    space = "https://acme.feishu.cn/wiki/space/7300000000000000001"
    with pytest.raises(InvalidSource, match="reads as an app"):
        make_source(kb.dataset, kind="feishu", location=space)
    with pytest.raises(InvalidSource, match="takes the whole space or book"):
        make_source(kb.dataset, kind="feishu", location=space, secret_env=VARIABLE,
                    subfolder="x")
    make_source(kb.dataset, kind="feishu", location=space, secret_env=VARIABLE)
    assert place_of(space).api == "https://open.feishu.cn"  # type: ignore[union-attr]
    lark = place_of("https://acme.larksuite.com/drive/folder/fldusRunbooks")
    assert lark is not None and lark.api == "https://open.larksuite.com" and not lark.wiki
    own = place_of("https://feishu.example.com/wiki/settings/7300000000000000001")
    assert own is not None and own.api == "https://feishu.example.com" and own.wiki
