"""Question sets of a batch hit test: JSON lines or CSV, as people upload or paste them."""

from __future__ import annotations

import json

import pytest

from evaluation.question_sets import (
    MAX_BYTES,
    MAX_QUESTIONS,
    BatchQuestion,
    QuestionSetError,
    question_set_parse,
    undeclared_question,
)

ROOT_QUESTIONS = "knowledge_base/eval/questions.jsonl"


def parse(text: str) -> list[BatchQuestion]:
    return question_set_parse(text.encode("utf-8"))


def test_json_lines_take_one_or_several_expected_documents_or_none() -> None:
    questions = parse('{"id": "a", "query": "nginx 502", "expected": "web/nginx.md"}\n\n'
                      '{"question": "two of them", "expected": ["a.md", "123", "a.md"]}\n'
                      '{"query": "off topic", "expected": null}\n')
    assert questions == [BatchQuestion("a", "nginx 502", ("web/nginx.md",)),
                         BatchQuestion("q2", "two of them", ("a.md", "123")),
                         BatchQuestion("q3", "off topic", ())]


def test_the_hit_test_file_of_the_sample_reads_as_a_question_set() -> None:
    with open(ROOT_QUESTIONS, "rb") as handle:
        raw = handle.read()
    questions = question_set_parse(raw)
    rows = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
    assert [q.id for q in questions] == [r["id"] for r in rows]
    assert [q.expected for q in questions] == [(r["expect"],) if r["expect"] else ()
                                               for r in rows]


def test_csv_with_a_header_row_and_several_expected_documents() -> None:
    questions = parse("\ufeffQuery,expected,id\n"
                      'Redis 内存满了怎么办,cache/redis.md|cache/redis-2.md,r1\n'
                      '"a, quoted query",,\n')
    assert questions == [
        BatchQuestion("r1", "Redis 内存满了怎么办", ("cache/redis.md", "cache/redis-2.md")),
        BatchQuestion("q2", "a, quoted query", ())]


def test_a_question_may_narrow_its_lookup_as_a_calls_filters_do() -> None:
    narrowed = {"domain": ["web"], "fields": {"team": ["sre"]}}
    questions = parse(json.dumps({"query": "a", "expected": "a.md", "filters": narrowed})
                      + '\n{"query": "b", "filters": null}\n')
    assert questions[0].filters == narrowed and questions[1].filters == {}
    assert questions[0].narrowed.match.fields == (("team", ("sre",)),)
    assert BatchQuestion.of_json(questions[0].as_json()) == questions[0]
    assert "filters" not in questions[1].as_json()
    csv_set = parse('query,filters\nnginx 502,"{""format"": [""md""]}"\nplain,\n')
    assert [q.filters for q in csv_set] == [{"format": ["md"]}, {}]
    assert undeclared_question(questions, ["team"]) is None
    assert "question q1: not a filterable field of this tenant: 'team'" in (
        undeclared_question(questions, []) or "")


@pytest.mark.parametrize("text, message", [
    ("", "no questions"),
    ('{"query": "a", "filters": {"colour": ["red"]}}\n', "line 1: filters: .*not a filter"),
    ('{"query": "a", "filters": ["md"]}\n', "line 1: filters"),
    ('query,filters\na,{oops\n', "line 2: filters are not JSON"),
    ('{"query": "a", "filters": {"updated_after": "soon"}}\n', "line 1: filters"),
    ('{"query": "a"}\nnot json\n', "line 2: not JSON"),
    ('["a"]\n', "line 1: not a JSON object"),
    ('{"query": "  "}\n', "line 1: no query"),
    ('{"query": "a", "expected": [1]}\n', "line 1: expected must be"),
    ('{"id": "x", "query": "a"}\n{"id": "x", "query": "b"}\n', "line 2: id 'x' is used twice"),
    ("text,answer\nhello,world\n", "a CSV needs a header row with a `query` column"),
    (json.dumps({"query": "a", "expected": [f"d{n}" for n in range(21)]}) + "\n",
     "more than 20 expected documents"),
])
def test_a_bad_set_names_its_first_problem(text: str, message: str) -> None:
    with pytest.raises(QuestionSetError, match=message):
        parse(text)


def test_sets_are_bounded_in_bytes_questions_and_query_length(settings) -> None:
    with pytest.raises(QuestionSetError, match=f"{MAX_QUESTIONS} at most"):
        parse("".join(f'{{"query": "q{n}"}}\n' for n in range(MAX_QUESTIONS + 1)))
    with pytest.raises(QuestionSetError, match=f"{MAX_BYTES} at most"):
        question_set_parse(b"x" * (MAX_BYTES + 1))
    settings.KB_MAX_QUERY_CHARS = 10
    with pytest.raises(QuestionSetError, match="line 1: the query is longer than 10"):
        parse('{"query": "eleven chars"}\n')
    with pytest.raises(QuestionSetError, match="not UTF-8"):
        question_set_parse(b"query\n\xff\xfe\n")


@pytest.mark.parametrize("raw, message", [
    (b"[" * 5000 + b"\n", "line 1: not a question"),
    (b'{"query": "a", "id": ' + b"9" * 5000 + b"}\n", "line 1: not a question"),
    (b'{"query": "\\ud800 lone surrogate"}\n', "not valid Unicode text"),
    (b'{"query": "a", "expected": ["\\udfff"]}\n', "not valid Unicode text"),
    (b"query," + b"x" * 200_000 + b"\nhello,1\n", "not CSV"),
    (b'{"query": "a", "id": true}\n', "id must be a string or a number"),
])
def test_hostile_sets_are_refused_with_a_reason_not_a_crash(raw: bytes, message: str) -> None:
    with pytest.raises(QuestionSetError, match=message):
        question_set_parse(raw)
