"""The quality and speed commands run end to end at a small size (CI proves they work; the
figures themselves come from running them at full size, see docs/benchmarks.md)."""

from __future__ import annotations

import json
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from datasets.models import Document
from evaluation.suites import mrr_at, ndcg_at, recall_at
from tests.retrieval.chat_server import asks_to_translate, chat_server

CORPUS = [
    ("d1", "Redis eviction", "When Redis reaches maxmemory it evicts keys by the policy."),
    ("d2", "MySQL replication lag", "Seconds_Behind_Master grows when the SQL thread lags."),
    ("d3", "JVM heap", "java.lang.OutOfMemoryError: Java heap space means the heap is full."),
    ("d4", "磁盘满了", "No space left on device：用 df -h 和 du 找到占用最大的目录。"),
    ("d5", "DNS", "NXDOMAIN answers mean the name does not exist in the zone."),
]
QUERIES = [("q1", "redis maxmemory eviction policy", "d1"),
           ("q2", "replica lag Seconds_Behind_Master", "d2"),
           ("q3", "磁盘空间满了怎么办", "d4")]
GOLD = {"q1": ["evicts keys by the policy"], "q2": ["the SQL thread lags"],
        "q3": ["df -h"]}


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("\n".join(
        json.dumps({"_id": i, "title": t, "text": x}, ensure_ascii=False)
        for i, t, x in CORPUS), encoding="utf-8")
    (folder / "queries.jsonl").write_text("\n".join(
        json.dumps({"_id": q, "text": t, "metadata": {"answers": GOLD[q]}}, ensure_ascii=False)
        for q, t, _ in QUERIES),
        encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, _, d in QUERIES))
    return folder


def test_metrics_on_a_known_ranking() -> None:
    relevant = {"a": 1, "c": 1}
    assert mrr_at(["b", "a", "c"], relevant, 10) == 0.5
    assert recall_at(["b", "a"], relevant, 10) == 0.5
    assert ndcg_at(["a", "c"], relevant, 10) == 1.0
    assert 0 < ndcg_at(["b", "a", "c"], relevant, 10) < 1


@pytest.mark.django_db
def test_fusion_grid_scores_every_candidate_beside_the_arms(store: Any, suite: Path) -> None:
    out = StringIO()
    call_command("fusion_grid", "--suite", str(suite), "--json", "--depth", "10", stdout=out)
    rows = {r["name"]: r for r in json.loads(out.getvalue())["rows"]}
    assert list(rows)[:2] == ["dense alone", "BM25 alone"]
    default = rows["ADAPTIVE from CONVEX, dense 0.3 : BM25 0.7"]
    assert default["ndcg_at_10"] > 0.9 and default["recall_at_100"] == 1.0
    # The same lists through evaluate's lookup give the same figure for the default fusion.
    out = StringIO()
    call_command("evaluate", "--suite", str(suite), "--json", "--depth", "10", stdout=out)
    assert json.loads(out.getvalue())["ndcg@10"] == pytest.approx(default["ndcg_at_10"],
                                                                  abs=1e-3)
    text = StringIO()
    call_command("fusion_grid", "--suite", str(suite), "--depth", "10", stdout=text)
    assert "vs better arm" in text.getvalue()
    with pytest.raises(CommandError, match="--depth"):
        call_command("fusion_grid", "--suite", str(suite), "--depth", "5")


@pytest.mark.django_db
def test_evaluate_finds_the_right_documents_and_reuses_its_index(store: Any, suite: Path,
                                                                 capsys: Any) -> None:
    out = StringIO()
    call_command("evaluate", "--suite", str(suite), "--json", "--depth", "10", stdout=out)
    report = json.loads(out.getvalue())
    assert report["queries"] == 3 and report["ndcg@10"] > 0.9 and report["recall@100"] == 1.0
    assert report["index"]["indexed_now"] == len(CORPUS)
    assert "queries 3/3" in capsys.readouterr().err  # progress

    again = StringIO()
    call_command("evaluate", "--suite", str(suite), "--json", "--depth", "10", stdout=again)
    assert json.loads(again.getvalue())["index"]["indexed_now"] == 0  # nothing re-embedded


@pytest.mark.django_db
def test_evaluate_answers_measures_the_extractive_answer_and_the_model(
        store: Any, suite: Path, settings: Any) -> None:
    out = StringIO()
    call_command("evaluate", "--suite", str(suite), "--answers", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert (report["mode"], report["generator"], report["queries"]) == ("answers", "extractive", 3)
    assert report["answer_accuracy"] == 1.0 and report["citation_precision"] == 1.0, report
    assert report["share_answered"] == 1.0 and report["share_empty"] == 0.0

    with chat_server() as server:
        settings.KB_CHAT_BASE_URL, settings.KB_CHAT_MODEL = server.url, "local-chat"
        out = StringIO()
        call_command("evaluate", "--suite", str(suite), "--answers", "--json", stdout=out)
    report = json.loads(out.getvalue())
    # One answer a question. The corpus holds both languages, but each question's own search
    # was PRECISE: none waited for a translation.
    answers = [r for r in server.requests if not asks_to_translate(r)]
    assert report["generator"] == "openai/local-chat" and len(answers) == 3
    assert len(server.requests) == 3
    assert report["answer_accuracy"] == 1.0
    with pytest.raises(CommandError, match="no --set or --mode"):
        call_command("evaluate", "--suite", str(suite), "--answers", "--set", "return_n=2")


@pytest.mark.django_db
def test_evaluate_set_switches_any_field_even_those_evaluation_presets(store: Any,
                                                                      suite: Path) -> None:
    def run(*sets: str) -> dict[str, Any]:
        out = StringIO()
        call_command("evaluate", "--suite", str(suite), "--json", "--depth", "10",
                     *[a for s in sets for a in ("--set", s)], stdout=out)
        report: dict[str, Any] = json.loads(out.getvalue())
        return report

    # The relevance gate is off in evaluation unless --set turns it on: at 1.0 only the chunk
    # that holds q2's identifier Seconds_Behind_Master passes (1 query of 3 finds its document).
    assert run("reference_threshold=1.0", "precise_threshold=1.0")["ndcg@10"] == pytest.approx(
        1 / 3, abs=1e-3)
    transformed = run("enable_query_transform=true", "query_transform_strategy=MULTI_QUERY")
    assert transformed["config"]["query_transform_strategy"] == "MULTI_QUERY"
    assert transformed["ndcg@10"] > 0.9
    with pytest.raises(CommandError, match="return_n"):
        run("return_n=50")  # above the depth's retrieve_k: refused, not ignored


@pytest.mark.django_db
def test_bench_peer_runs_the_peer_and_the_platform_in_rounds(store: Any, suite: Path,
                                                             tmp_path: Path) -> None:
    # A stand-in for the peer's script (its own virtualenv is not part of the test set-up):
    # it prints the peer's JSON line, with the arguments it was given.
    script = tmp_path / "peer.py"
    script.write_text("import json, sys\n"
                      "k = sys.argv[sys.argv.index('--k') + 1]\n"
                      "print(json.dumps({'latency_ms_p50': 10.0, 'latency_ms_p95': 12.0,\n"
                      "                  'ndcg@10': 0.5, 'k': int(k), 'argv': sys.argv}))\n")
    out = StringIO()
    call_command("bench_peer", "--suite", str(suite), "--lang", "en", "--peer-python",
                 sys.executable, "--peer-script", str(script), "--depths", "10,20",
                 "--queries", "10", "--rounds", "2", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert [(r["round"], r["depth"]) for r in report["rows"]] == [(1, 10), (1, 20), (2, 10),
                                                                  (2, 20)]
    for row in report["rows"]:
        assert row["peer_p50_ms"] == 10.0 and row["platform_p50_ms"] > 0
        assert row["ratio_p50"] == round(row["platform_p50_ms"] / 10.0, 2)
        assert row["platform_ndcg@10"] > 0.9
        assert row["engine_p50_ms"] > 0
        assert row["engine_vs_peer_p50"] == round(row["engine_p50_ms"] / 10.0, 2)
        # The same lookup with one Milvus request (HYBRID execution), side by side.
        assert row["milvus_hybrid_p50_ms"] > 0 and row["milvus_hybrid_ndcg@10"] > 0.9
        assert row["milvus_hybrid_vs_peer_p50"] == round(row["milvus_hybrid_p50_ms"] / 10.0, 2)
    assert set(report["median_ratio_p50"]) == {"10", "20"}
    with pytest.raises(CommandError, match="does not exist"):
        call_command("bench_peer", "--suite", str(suite), "--lang", "en", "--peer-python",
                     str(tmp_path / "nope"), "--peer-script", str(script))


@pytest.mark.django_db
def test_evaluate_rejects_a_folder_that_is_not_a_suite(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="corpus.jsonl is missing"):
        call_command("evaluate", "--suite", str(tmp_path))


@pytest.mark.django_db
def test_bench_lookup_compares_the_rest_call_with_the_floor(store: Any) -> None:
    out = StringIO()
    call_command("bench_lookup", "--sizes", "300,600", "--queries", "5", "--json", stdout=out)
    rows = json.loads(out.getvalue())["lookup"]
    assert [row["chunks"] for row in rows] == [300, 600]
    for row in rows:
        assert row["rest_p50_ms"] > 0 and row["floor_p50_ms"] > 0
        assert row["ratio_p50"] == round(row["rest_p50_ms"] / row["floor_p50_ms"], 2)
        assert row["filtered_p50_ms"] > 0 and row["filtered_vs_rest_p50"] == round(
            row["filtered_p50_ms"] / row["rest_p50_ms"], 2)
        # Calls for a person while about half the documents are restricted, against open ones.
        assert row["restricted_documents"] > 0
        assert row["open_p50_ms"] > 0 and row["person_p50_ms"] > 0
    assert "p50_growth_vs_first" in rows[-1]
    assert not any(Document.objects.values_list("readers", flat=True))  # restored


@pytest.mark.django_db
def test_bench_fetch_times_sections_of_a_long_document_within_their_budget() -> None:
    out = StringIO()
    call_command("bench_fetch", "--lines", "300", "--queries", "5", "--json", stdout=out)
    rows = json.loads(out.getvalue())["fetch"]
    assert [row["shape"] for row in rows] == ["sections", "one_section"]
    for row in rows:
        assert row["chunks"] > 10
        for budget in row["budgets"]:
            assert budget["p50_ms"] > 0 and 0 < budget["chars_p50"] <= budget["max_chars"]
    # Without headings a section is the whole document: the budget is what bounds it.
    assert rows[1]["budgets"][0]["chars_p50"] > rows[0]["budgets"][0]["chars_p50"]


@pytest.mark.django_db
def test_bench_copies_finds_no_place_spent_on_a_copy(store: Any, tmp_path: Path) -> None:
    from tests.retrieval.conftest import KAFKA, NGINX, PHOTO, write_runbooks

    knowledge = tmp_path / "kb"
    write_runbooks(knowledge / "web", {"nginx.md": NGINX})
    write_runbooks(knowledge / "messaging", {"kafka.md": KAFKA})
    write_runbooks(knowledge / "misc", {"photo.md": PHOTO})
    write_runbooks(knowledge / "eval", {name: "".join(json.dumps(
        {"id": f"{name}-{n}", "query": query, "expect": expect, "kind": "plain",
         "split": "held-out"}) + "\n" for n, (query, expect) in enumerate([
            ("nginx 502 bad gateway upstream connection refused", "web/nginx.md"),
            ("kafka consumer group lag keeps growing", "messaging/kafka.md")]))
        for name in ("questions.jsonl", "paraphrased.jsonl")})
    out = StringIO()
    call_command("bench_copies", "--knowledge", str(knowledge), "--every", "1", "--json",
                 stdout=out)
    row = json.loads(out.getvalue())["copies"]
    assert (row["questions"], row["answered"], row["right_first"]) == (4, 4, 4)
    # Each runbook is there three times: copies are named, and take no place.
    assert row["places_on_copies"] == 0 and row["copies_in_also_in"] >= row["places"]


@pytest.mark.django_db(transaction=True)  # uploads enqueue their indexing on commit
def test_bench_ingest_measures_the_platform_against_the_embedder(store: Any,
                                                                eager_tasks: None) -> None:
    out = StringIO()
    call_command("bench_ingest", "--documents", "2", "--sections", "2", "--timeout", "120",
                 "--json", stdout=out)
    row = json.loads(out.getvalue())["ingest"]
    assert row["chunks"] >= 4 and row["platform_chunks_per_s"] > 0
    assert row["embedder_chunks_per_s"] > 0 and row["eager"] is True


@pytest.mark.django_db
def test_evaluate_counts_the_queries_that_asked_a_model_for_a_translation(
        store: Any, tmp_path: Path, settings: Any) -> None:
    """A suite's figure moved by translation, or not, says how many of its questions were
    translated: here the one Chinese question of an English-only corpus, not the English."""
    from retrieval.lookup.graph.translate import CACHE

    folder = tmp_path / "english"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("\n".join(
        json.dumps({"_id": i, "title": t, "text": x}) for i, t, x in CORPUS if i != "d4"),
        encoding="utf-8")
    asked = [("q1", "redis maxmemory eviction policy", "d1"),
             ("q2", "缓存的内存满了，写入失败怎么办", "d1")]
    (folder / "queries.jsonl").write_text("\n".join(
        json.dumps({"_id": q, "text": t}, ensure_ascii=False) for q, t, _ in asked),
        encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, _, d in asked))
    CACHE.clear()
    with chat_server() as server:
        settings.KB_CHAT_BASE_URL, settings.KB_LOCAL_MODEL_URL = "", server.url
        out = StringIO()
        call_command("evaluate", "--suite", str(folder), "--json", "--depth", "10", stdout=out)
        text = StringIO()
        call_command("evaluate", "--suite", str(folder), "--depth", "10", stdout=text)
    CACHE.clear()
    assert json.loads(out.getvalue())["translations"] == {"translated": 1}
    assert [asks_to_translate(r) for r in server.requests] == [True]  # then from the cache
    assert "translation 1 translated" in text.getvalue()
