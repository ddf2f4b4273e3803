"""An S3-compatible bucket as a source, against a real S3 server on 127.0.0.1 (moto's): the
objects under a prefix listed whole and page by page, read again only when their ETag moved,
deleted only after a complete listing; a refused credential fails clearly and the credential
is nowhere; S3's "slow down" is retried; a sync cut short resumes where it stopped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from datasets.models import Document, Job, Source
from datasets.sources import s3
from datasets.sources.http import ATTEMPTS
from datasets.sources.services import InvalidSource
from tests.datasets.sources.builders import (
    Bucket,
    doc,
    live_paths,
    make_source,
    s3_server,
    sync,
    sync_counts,
    timed_sync,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]

KEY_ID, SECRET = "AKIAKBPLATFORMTEST01", "s3cr3t/Access+Key0123456789abcdefghijk"
VARIABLE = "KB_SOURCE_SECRET_ACME_BUCKET"  # the kb fixture's tenant is acme


@pytest.fixture
def bucket(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bucket]:
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, f"{KEY_ID}:{SECRET}")
    with s3_server(Bucket(access_key=KEY_ID, secret_key=SECRET)) as running:
        running.client.create_bucket(Bucket="docs")
        running.put("docs", {f"runbooks/r{n:03}.md": doc(f"Runbook {n}") for n in range(200)})
        running.put("docs", {"other/x.md": doc("Elsewhere"), "runbooks/sub/": b"",
                             "runbooks/.draft.md": doc("Draft")})
        yield running


def _source(kb: Any, bucket: Bucket, **fields: Any) -> Source:
    return make_source(kb.dataset, kind="s3", location=f"{bucket.url}/docs",
                       **{"subfolder": "runbooks", "secret_env": VARIABLE, **fields})




def test_a_bucket_syncs_its_prefix_page_by_page_and_then_only_what_changed(
        kb: Any, store: Any, bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3, "PAGE_KEYS", 64)
    source = _source(kb, bucket)
    seconds = []
    job = timed_sync(source, seconds)
    assert job.status == Job.Status.SUCCEEDED, job.log
    assert sync_counts(job) == (200, 0, 0, 0, 0) and job.total == 200
    assert live_paths(source) == {f"src/r{n:03}.md" for n in range(200)}  # no marker, no hidden
    listings = [hit for hit, _ in bucket.hits if "list-type=2" in hit]
    assert len(listings) == 4 and all("max-keys=64" in hit for hit in listings)
    assert sum("continuation-token=" in hit for hit in listings) == 3
    first = Document.objects.get(source=source, source_path="src/r007.md")
    assert first.url == f"{bucket.url}/docs/runbooks/r007.md"
    assert first.title == "Runbook 7"

    # Again: every ETag as stored, no object read.
    bucket.hits.clear()
    job = timed_sync(source, seconds)
    assert sync_counts(job) == (0, 0, 200, 0, 0)
    assert bucket.object_reads() == []

    # One changed, one deleted, one added: those two read, the deleted one's document gone.
    bucket.put("docs", {"runbooks/r001.md": doc("Runbook 1", "Rotated the keys."),
                        "runbooks/new.md": doc("Newcomer")})
    bucket.client.delete_object(Bucket="docs", Key="runbooks/r002.md")
    bucket.hits.clear()
    job = timed_sync(source, seconds)
    print("s3 source, 200 objects (docs/benchmarks.md): first sync, nothing changed, "
          "one added + one changed + one deleted:", " / ".join(f"{s:.2f} s" for s in seconds))
    assert sync_counts(job) == (1, 1, 198, 1, 0)
    assert sorted(bucket.object_reads()) == ["/docs/runbooks/new.md?",
                                            "/docs/runbooks/r001.md?"]
    assert "src/r002.md" not in live_paths(source) and "src/new.md" in live_paths(source)
    # Found by a lookup, linking back to its object.
    found = kb.tool.post("/api/tools/lookup_knowledge",
                         {"query": "Newcomer runbook"}, format="json").json()
    assert found["evidence"][0]["url"] == f"{bucket.url}/docs/runbooks/new.md"


def test_a_listing_that_fails_deletes_nothing_and_slow_down_is_retried(
        kb: Any, store: Any, bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3, "PAGE_KEYS", 100)
    source = _source(kb, bucket)
    assert sync(source).status == Job.Status.SUCCEEDED
    bucket.client.delete_object(Bucket="docs", Key="runbooks/r150.md")
    # The second page fails every try: the sync fails, and nothing is deleted.
    bucket.faults["continuation-token="] = [500] * ATTEMPTS
    job = sync(source)
    assert (job.status, job.error) == (Job.Status.FAILED,
                                       "the bucket answered 500 (InternalError)")
    assert "nothing deleted" in str(job.log) and len(live_paths(source)) == 200
    # A 200 that is no listing (a portal's sign-in page): no empty listing, nothing deleted.
    bucket.faults["list-type=2"] = [200]
    job = sync(source)
    assert job.error == ("the bucket's answer is not a listing of its objects (S3's "
                         "ListBucketResult)") and len(live_paths(source)) == 200
    # S3 asking to slow down, twice: retried, and the sync completes.
    bucket.faults["list-type=2"] = [503, 503]
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED, job.log
    assert sync_counts(job) == (0, 0, 199, 1, 0) and "src/r150.md" not in live_paths(source)


def test_a_sync_cut_short_resumes_where_it_stopped(kb: Any, store: Any, bucket: Bucket) -> None:
    source = _source(kb, bucket)
    bucket.faults["/docs/runbooks/r007.md"] = [403]
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED
    assert sync_counts(job) == (199, 0, 0, 0, 1)
    assert "failed: r007.md: the bucket answered 403 (AccessDenied)" in str(job.log)
    bucket.hits.clear()
    job = sync(source)
    assert sync_counts(job) == (1, 0, 199, 0, 0)
    assert bucket.object_reads() == ["/docs/runbooks/r007.md?"]


def test_a_refused_credential_fails_clearly_and_is_nowhere(
        kb: Any, store: Any, bucket: Bucket, monkeypatch: pytest.MonkeyPatch,
        caplog: Any, capfd: Any) -> None:
    source = _source(kb, bucket)
    monkeypatch.setenv(VARIABLE, f"AKIAWRONG:{SECRET}")
    job = sync(source)
    assert (job.status, job.error) == (
        Job.Status.FAILED, f"the bucket refused the request (InvalidAccessKeyId): the bucket "
                           f"knows no access key by the id in {VARIABLE}")
    monkeypatch.setenv(VARIABLE, f"{KEY_ID}:not-the-secret")
    assert sync(source).error == (f"the bucket refused the request (SignatureDoesNotMatch): the "
                                  f"secret access key in {VARIABLE} does not sign as the bucket "
                                  "expects")
    monkeypatch.setenv(VARIABLE, SECRET)  # no access key id before it
    job = sync(source)
    assert job.error == (f"the credential in {VARIABLE} is not <access key id>:<secret access "
                         "key>")
    source.refresh_from_db()
    kept = [job.error, str(job.log), str(job.detail), source.last_error,
            capfd.readouterr().err, caplog.text]
    assert not any(SECRET in text or SECRET.split("/")[0] in text for text in kept)
    assert live_paths(source) == set()
    anonymous = make_source(kb.dataset, name="anon", kind="s3", location=f"{bucket.url}/docs")
    assert "this source reads anonymously" in sync(anonymous).error


def test_keys_are_read_as_named_and_signed_as_sent(kb: Any, store: Any, bucket: Bucket) -> None:
    """Spaces, non-ASCII letters, `+` and `%` in keys: listed URL-encoded, each GET's path
    quoted as signed (the server checks every signature against the request as it came)."""
    odd = ["run books/é x+y.md", "a%20b.md", "naïve (copy) ~1.md"]
    bucket.put("docs", {f"odd keys/{key}": doc(f"Odd {n}") for n, key in enumerate(odd)})
    job = sync(_source(kb, bucket, subfolder="odd keys"))
    assert sync_counts(job) == (3, 0, 0, 0, 0), job.log
    assert all(status == 200 for _, status in bucket.hits)
    documents = Document.objects.filter(source__name="src").order_by("title")
    assert [(d.title, d.source_path) for d in documents] == [
        (f"Odd {n}", f"src/{key}") for n, key in enumerate(odd)]
    assert documents[0].url == f"{bucket.url}/docs/odd%20keys/run%20books/%C3%A9%20x%2By.md"


def test_an_object_over_the_upload_limit_is_a_failed_line(kb: Any, store: Any, bucket: Bucket,
                                                          settings: Any) -> None:
    bucket.put("docs", {"big/huge.md": b"# Huge\n\n" + b"x" * 4096, "big/small.md": doc("S")})
    settings.KB_MAX_UPLOAD_BYTES = 2048
    job = sync(_source(kb, bucket, subfolder="big", max_page_bytes=2048))
    assert job.status == Job.Status.SUCCEEDED and sync_counts(job) == (1, 0, 0, 0, 1)
    assert "failed: huge.md: 4104 bytes, over KB_MAX_UPLOAD_BYTES (2048)" in str(job.log)


def test_a_bucket_url_is_checked_when_saved(kb: Any, settings: Any) -> None:
    for location, why in [("https://s3.example.org/", "path style"),
                          ("https://s3.example.org/Docs", "path style"),
                          ("https://s3.example.org/docs?versionId=1", "without a query"),
                          ("https://s3.example.org//docs", "path style"),
                          ("https://bücher.example/docs", "in ASCII"),
                          ("http://10.0.0.8:9000/docs", "KB_OUTBOUND_ALLOWED_HOSTS")]:
        with pytest.raises(InvalidSource, match=why):
            make_source(kb.dataset, kind="s3", location=location)
    with pytest.raises(InvalidSource, match="over https only"):
        make_source(kb.dataset, kind="s3", location="http://s3.example.org/docs",
                    secret_env=VARIABLE)
    for folder in ("./docs", "docs/../other", "/docs"):
        with pytest.raises(InvalidSource, match="without . or .."):
            make_source(kb.dataset, kind="s3", location="https://s3.example.org/docs",
                        subfolder=folder)
    made = make_source(kb.dataset, kind="s3", location="https://s3.eu-west-3.amazonaws.com/docs")
    assert s3.bucket_region(made) == "eu-west-3"
    made.region = "auto"
    assert s3.bucket_region(made) == "auto"
