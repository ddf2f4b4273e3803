"""GET /api/health: whether this process reaches its database, cache and Milvus now."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from retrieval.index.milvus.connection import reset_connection

pytestmark = pytest.mark.django_db


def test_health_answers_ok_without_a_key(store: Any) -> None:
    response = Client().get("/api/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok",
                               "checks": {"database": "ok", "cache": "ok", "milvus": "ok"}}


def test_milvus_not_answering_is_503_naming_the_part_and_nothing_more(
        store: Any, settings: Any) -> None:
    serving = settings.MILVUS_URI
    settings.MILVUS_URI, settings.MILVUS_TIMEOUT_SECONDS = "http://127.0.0.1:1", 2
    reset_connection()
    try:
        response = Client().get("/api/health")
    finally:
        settings.MILVUS_URI = serving  # the store fixture cleans up the real one after
        reset_connection()

    assert response.status_code == 503
    assert response.json() == {
        "code": "unavailable", "message": "not answering: milvus",
        "extra": {"checks": {"database": "ok", "cache": "ok", "milvus": "unavailable"}}}
