"""`manage.py fit_relevance`: the relevance model refitted from the fit halves of question
sets, through the lookups themselves."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from retrieval.index.embedders import get_embedder
from retrieval.lookup.relevance import FEATURES, RelevanceModel, model_path
from tests.retrieval.conftest import Imported


def _write(path: Path, rows: list[tuple[str, str, str | None, str]]) -> Path:
    path.write_text("".join(json.dumps({"id": id_, "query": query, "expect": expect,
                                        "kind": "plain" if expect else "off-topic",
                                        "split": split}) + "\n"
                            for id_, query, expect, split in rows), encoding="utf-8")
    return path


@pytest.mark.embedded
def test_the_model_is_fitted_on_the_fit_half_of_every_set_named(acme: Imported,
                                                                 tmp_path: Path) -> None:
    runbooks = _write(tmp_path / "runbooks.jsonl", [
        ("f1", "nginx 502 bad gateway connection refused while connecting to upstream",
         "nginx.md", "fit"),
        ("f2", "Kafka consumer group lag keeps growing on every partition", "kafka.md", "fit"),
        ("h1", "zebra stripes", "zebra.md", "held-out")])  # never read
    off_topic = _write(tmp_path / "off.jsonl", [
        ("o1", "how do I bake sourdough bread", None, "fit"),
        ("o2", "the best hiking trails near the lake", None, "fit")])
    out = io.StringIO()
    shipped = model_path(get_embedder().name)
    before = shipped.read_bytes() if shipped.exists() else None

    call_command("fit_relevance", "--tenant", "acme", "--questions", str(runbooks),
                 "--questions", str(off_topic), "--out", str(tmp_path / "model.json"),
                 stdout=out)

    model = RelevanceModel.of_json((tmp_path / "model.json").read_text(encoding="utf-8"))
    assert model.embedder == get_embedder().name
    assert model.fitted_on["questions"] == {str(runbooks): 2, str(off_topic): 2}
    assert model.fitted_on["split"] == "fit" and model.fitted_on["tenant"] == "acme"
    # Each question's pool: the candidates the gate judged, its runbook's chunks relevant.
    assert model.fitted_on["candidates"] >= 4 * 2
    assert 2 <= model.fitted_on["relevant"] < model.fitted_on["candidates"]
    lines = out.getvalue().splitlines()
    assert lines[0].endswith(f"→ {tmp_path / 'model.json'}")
    assert [line.split()[0] for line in lines[1:]] == [*FEATURES, "(bias)"]
    assert (shipped.read_bytes() if shipped.exists() else None) == before  # --out only


@pytest.mark.embedded
def test_a_held_out_half_is_never_fitted_on(acme: Imported, tmp_path: Path) -> None:
    held_out = _write(tmp_path / "h.jsonl", [("h1", "zebra stripes", "zebra.md", "held-out")])
    with pytest.raises(CommandError, match="no question of the fit split"):
        call_command("fit_relevance", "--tenant", "acme", "--questions", str(held_out),
                     "--out", str(tmp_path / "model.json"))
    only_off_topic = _write(tmp_path / "o.jsonl", [("o1", "sourdough", None, "fit")])
    with pytest.raises(CommandError, match="both relevant and irrelevant"):
        call_command("fit_relevance", "--tenant", "acme", "--questions", str(only_off_topic),
                     "--out", str(tmp_path / "model.json"))
    assert not (tmp_path / "model.json").exists()


@pytest.mark.embedded
def test_check_scores_the_model_on_the_held_out_halves_and_writes_nothing(
        acme: Imported, tmp_path: Path) -> None:
    questions = _write(tmp_path / "q.jsonl", [
        ("f1", "nginx 502 bad gateway connection refused while connecting to upstream",
         "nginx.md", "fit"),
        ("f2", "Kafka consumer group lag keeps growing on every partition", "kafka.md", "fit"),
        ("f3", "how do I bake sourdough bread", None, "fit"),
        ("h1", "upstream refused the connection and nginx answers 502", "nginx.md", "held-out"),
        ("h2", "the best hiking trails near the lake", None, "held-out")])
    model = tmp_path / "model.json"
    call_command("fit_relevance", "--tenant", "acme", "--questions", str(questions),
                 "--out", str(model), stdout=io.StringIO())
    fitted = model.read_bytes()
    out = io.StringIO()

    call_command("fit_relevance", "--tenant", "acme", "--questions", str(questions), "--check",
                 "--json", "--out", str(model), stdout=out)

    report = json.loads(out.getvalue())
    assert report["model"] == str(model)
    assert report["fit"] == RelevanceModel.of_json(fitted.decode()).fingerprint
    # The two held-out questions' pools, nginx's chunks the relevant ones.
    assert report["candidates"] >= 4 and 1 <= report["relevant"] < report["candidates"]
    assert sum(size for *_, size in report["bins"]) == report["candidates"]
    assert 0 <= report["calibration_error"] <= 1 and 0 <= report["auc"] <= 1
    assert model.read_bytes() == fitted
    # The held-out questions alone give the same rows: the fit half is not read.
    held_out = _write(tmp_path / "h.jsonl", [
        ("h1", "upstream refused the connection and nginx answers 502", "nginx.md", "held-out"),
        ("h2", "the best hiking trails near the lake", None, "held-out")])
    out = io.StringIO()
    call_command("fit_relevance", "--tenant", "acme", "--questions", str(held_out), "--check",
                 "--json", "--out", str(model), stdout=out)
    assert json.loads(out.getvalue()) == report | {"model": str(model)}

    fit_only = _write(tmp_path / "f.jsonl", [("f1", "sourdough", None, "fit")])
    with pytest.raises(CommandError, match="no question of the held-out split"):
        call_command("fit_relevance", "--tenant", "acme", "--questions", str(fit_only),
                     "--check", "--out", str(model))
    with pytest.raises(CommandError, match="missing.json"):
        call_command("fit_relevance", "--tenant", "acme", "--questions", str(questions),
                     "--check", "--out", str(tmp_path / "missing.json"))
    other = tmp_path / "other.json"
    other.write_text(RelevanceModel.of_json(fitted.decode()).as_json().replace(
        f'"embedder": "{get_embedder().name}"', '"embedder": "someone/else"'), encoding="utf-8")
    with pytest.raises(CommandError, match="someone/else's model"):
        call_command("fit_relevance", "--tenant", "acme", "--questions", str(questions),
                     "--check", "--out", str(other))
    with pytest.raises(CommandError, match="--json goes with --check"):
        call_command("fit_relevance", "--tenant", "acme", "--questions", str(questions),
                     "--json", "--out", str(model))
