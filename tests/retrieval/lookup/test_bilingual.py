"""The BM25 arm's words in the other language, from CC-CEDICT."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kbplatform.processes import ROOT
from retrieval.lookup.bilingual import MAX_TERMS, other_language_terms
from tests.conftest import database_url


def test_a_chinese_word_brings_its_english_glosses_the_computing_sense_first() -> None:
    assert other_language_terms("死锁")[:1] == ("deadlock",)
    assert other_language_terms("延迟很大")[:2] == ("lag", "delay")  # "(computing) to lag"
    assert "certificate" in other_language_terms("证书过期了")


def test_an_english_word_brings_the_chinese_words_it_glosses() -> None:
    assert "死锁" in other_language_terms("deadlock")


def test_no_term_the_question_has_already_and_none_for_words_it_does_not_know() -> None:
    assert "certificate" not in other_language_terms("证书 certificate")
    assert other_language_terms("xqzv 0x5d09 1040") == ()


def test_a_pasted_log_adds_a_bounded_number_of_terms() -> None:
    log = "数据库 连接 超时 内存 磁盘 网络 " * 500 + "memory disk network timeout " * 500
    assert 0 < len(other_language_terms(log)) <= MAX_TERMS


@pytest.mark.embedded
def test_a_web_process_reads_the_dictionary_as_it_starts_not_on_a_lookup(tmp_path) -> None:
    """On by default, the dictionary took its first lookup 2 s longer."""
    started = ("import threading, kbplatform.wsgi\n"
               "from retrieval.lookup import bilingual\n"
               "[t.join(60) for t in threading.enumerate() if t.name == 'kb-warm']\n"
               "print(bilingual._loaded is not None)")
    done = subprocess.run([sys.executable, "-c", started], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "DATABASE_URL": database_url(),
                               "KB_VAR_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]
