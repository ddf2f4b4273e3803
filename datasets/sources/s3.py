"""An S3-compatible bucket as a source (AWS S3, MinIO, Ceph, Cloudflare R2, ...): the objects
under a folder of it, listed whole (ListObjectsV2, a page of PAGE_KEYS at a time) before any is
read, so a listing that fails deletes nothing; an object is read again only when its ETag moved.

Every request goes through kbplatform/outbound.py (the policy, its addresses checked at connect
time, no redirect, bounded answers). A source that names a credential, `<access key id>:<secret
access key>`, signs each request with AWS Signature Version 4 by botocore's signer (AWS's own,
well kept); one that names none reads a public bucket anonymously. An answer S3 documents as
"slow down" or "try again" (503 SlowDown, 500 InternalError, and 429, 502, 504) is asked again
with backoff, its Retry-After honoured, within the sync's time (datasets/sources/http.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from urllib.parse import quote, unquote_plus, urlencode, urlsplit
from xml.etree import ElementTree

import httpx2
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from django.conf import settings

from datasets.models import REGION_PATTERN, Source
from datasets.sources.base import (
    Deadline,
    Globs,
    Item,
    ItemFailed,
    SyncFailed,
    hidden,
    listed_item,
    max_path,
    too_many,
)
from datasets.sources.http import AGENT, Answer, bounded_request, retried
from datasets.sources.secrets import source_secret
from kbplatform import outbound

PAGE_KEYS = 1000  # S3's own most keys a ListObjectsV2 page holds
# A listing page of 1,000 keys is about 300 KB; no answer of a listing is read past this.
MAX_LISTING_BYTES = 4 << 20
# Keys under the folder that a listing reads at most, the globs' or not: a folder holding many
# more than the source takes is narrowed, not read whole at every sync.
KEYS_PER_FILE = 10
MAX_KEY_BYTES = 1024  # S3's own bound of a key
MAX_TOKEN_CHARS = 1024  # a continuation token is S3's opaque string, far shorter in practice
# The region a signature names when the source gives none and its host is no AWS one: the one
# MinIO, Ceph and most S3-compatible stores take.
DEFAULT_REGION = "us-east-1"
AWS_HOST = re.compile(r"^s3[.-]([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")
BUCKET_PATH = re.compile(r"^/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/?$")
S3_CODE = re.compile(r"^[A-Za-z0-9]{1,64}$")
# What an S3 refusal of a signed request means, for the source's owner.
REFUSED = {
    "SignatureDoesNotMatch": "the secret access key in {name} does not sign as the bucket expects",
    "RequestTimeTooSkewed": "this server's clock is too far from the bucket's: set it right "
                            "(NTP)",
    "InvalidAccessKeyId": "the bucket knows no access key by the id in {name}",
}


@dataclass(frozen=True)
class Listed:
    key: str
    path: str  # in the source: the key below the folder
    etag: str
    size: int


def bucket_refusal(location: str) -> str | None:
    """Why `location` is not a bucket's URL, path style (`https://<endpoint>/<bucket>`)."""
    parts = urlsplit(location)
    if parts.query or parts.fragment:
        return "the bucket's URL, without a query or a fragment"
    if not BUCKET_PATH.match(parts.path):
        return ("the bucket's URL, path style: https://<endpoint>/<bucket> (a bucket name of 3 "
                "to 63 lower-case letters, digits, . and -)")
    return None


def bucket_region(source: Source) -> str:
    """The region its requests' signatures name: the source's, else an AWS endpoint's
    (s3.<region>.amazonaws.com), else DEFAULT_REGION."""
    if source.region:
        return source.region
    found = AWS_HOST.match(urlsplit(source.location).hostname or "")
    return found.group(1) if found and found.group(1) != "external-1" else DEFAULT_REGION


def _local(tag: str) -> str:
    """An element's name without its namespace (S3 answers in its 2006-03-01 one)."""
    return tag.rpartition("}")[2]


def _child(element: ElementTree.Element, name: str) -> str:
    for child in element:
        if _local(child.tag) == name:
            return child.text or ""
    return ""


def _xml(body: bytes) -> ElementTree.Element | None:
    """The answer's XML, None when it is none (an encoding the parser does not know too)."""
    try:
        return ElementTree.fromstring(body)
    except (ElementTree.ParseError, LookupError, ValueError):
        return None


def s3_code(body: bytes) -> str:
    """The Code of an S3 error answer (`AccessDenied`, `NoSuchBucket`), "" when it has none."""
    error = _xml(body)
    code = _child(error, "Code") if error is not None else ""
    return code if S3_CODE.match(code) else ""


class S3Reader:
    def __init__(self, source: Source, deadline: Deadline) -> None:
        self.source, self.deadline = source, deadline
        self.commit = ""
        self.partial = ""
        self.expected = 0
        self.globs = Globs(source.include)
        self.max_bytes = settings.KB_MAX_UPLOAD_BYTES
        self.bucket = source.location.rstrip("/")
        folder = source.subfolder.strip("/")
        self.prefix = f"{folder}/" if folder else ""
        self.region = bucket_region(source)
        self.credential: Credentials | None = None
        self.longest = max_path(source)
        self.http = outbound.client(max_response_bytes=max(self.max_bytes, MAX_LISTING_BYTES))

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        if self.source.secret_env:
            self.credential = _credential(self.source)
        listed = self._listing()
        self.expected = len(listed)
        for entry in listed:
            yield listed_item(entry.path, entry.etag, entry.size, known=known,
                              longest=self.longest, max_bytes=self.max_bytes,
                              read=partial(self._object, entry), url=self._url(entry.key))

    def _url(self, key: str) -> str:
        return f"{self.bucket}/{quote(key, safe='/')}"

    def _listing(self) -> list[Listed]:
        """Every object under the folder that the globs take: the whole listing or
        SyncFailed (a bucket read in part deletes nothing, so it is not read in part)."""
        listed: list[Listed] = []
        keys, token, tokens = 0, "", set()
        while True:
            self.deadline.check()
            # Keys URL-encoded: one holding a character XML cannot carry is still listed.
            query = {"encoding-type": "url", "list-type": "2", "max-keys": str(PAGE_KEYS)}
            if self.prefix:
                query["prefix"] = self.prefix
            if token:
                query["continuation-token"] = token
            try:
                answer = self._request(
                    f"{self.bucket}?{urlencode(sorted(query.items()), quote_via=quote)}",
                    max_bytes=MAX_LISTING_BYTES)
            except outbound.AnswerTooLarge:
                raise SyncFailed(f"a page of the bucket's listing is over {MAX_LISTING_BYTES} "
                                 "bytes") from None
            except httpx2.HTTPError as exc:
                raise SyncFailed(self._unreachable(exc)) from None
            if answer.status != 200:
                raise SyncFailed(self._refusal(answer))
            page = _xml(answer.body)
            truncated = _child(page, "IsTruncated") if page is not None else ""
            if page is None or _local(page.tag) != "ListBucketResult" or truncated not in (
                    "true", "false"):
                raise SyncFailed("the bucket's answer is not a listing of its objects (S3's "
                                 "ListBucketResult)")
            found = [element for element in page if _local(element.tag) == "Contents"]
            keys += len(found)
            if keys > KEYS_PER_FILE * settings.KB_SOURCE_MAX_FILES:
                raise SyncFailed(f"more than {KEYS_PER_FILE * settings.KB_SOURCE_MAX_FILES} "
                                 "objects in the folder: narrow the source's sub-folder")
            for element in found:
                entry = self._entry(element)
                if entry is not None:
                    listed.append(entry)
                    if len(listed) > settings.KB_SOURCE_MAX_FILES:
                        raise too_many()
            if truncated == "false":
                return listed
            token = _child(page, "NextContinuationToken")
            if not token or len(token) > MAX_TOKEN_CHARS or token in tokens or not found:
                raise SyncFailed("the bucket's listing goes on without a new continuation "
                                 "token or without objects")
            tokens.add(token)

    def _entry(self, element: ElementTree.Element) -> Listed | None:
        """A listed object, None when the source does not take it: a folder's marker, a
        hidden name, one the globs leave, one outside the folder."""
        key = unquote_plus(_child(element, "Key"))
        path = key[len(self.prefix):]
        if not key.startswith(self.prefix) or not path or key.endswith("/") or hidden(path) \
                or len(key.encode()) > MAX_KEY_BYTES or not self.globs(path):
            return None
        try:
            size = int(_child(element, "Size"))
        except ValueError:
            raise SyncFailed("the bucket's listing gives an object no size") from None
        return Listed(key, path, _child(element, "ETag").strip('"'), size)

    def _object(self, entry: Listed) -> bytes:
        try:
            answer = self._request(self._url(entry.key), max_bytes=self.max_bytes)
        except outbound.AnswerTooLarge as exc:
            raise ItemFailed(f"over {exc.limit} bytes (KB_MAX_UPLOAD_BYTES)") from None
        except (httpx2.TimeoutException, httpx2.InvalidURL) as exc:
            raise ItemFailed(self._unreachable(exc)) from None
        except httpx2.HTTPError as exc:  # the bucket is gone: the sync stops, nothing deleted
            raise SyncFailed(self._unreachable(exc)) from None
        if answer.status == 200:
            return answer.body
        if answer.status == 404:
            raise ItemFailed("gone since the listing")
        code = s3_code(answer.body)
        raise ItemFailed(f"the bucket answered {answer.status}{f' ({code})' if code else ''}")

    def _unreachable(self, exc: Exception) -> str:
        if isinstance(exc, httpx2.TimeoutException):
            return "the bucket did not answer in time (KB_SOURCE_HTTP_TIMEOUT_SECONDS)"
        if isinstance(exc, httpx2.InvalidURL):
            return "a URL the bucket's answer led to is not one"
        return f"could not connect to {urlsplit(self.bucket).netloc}"

    def _refusal(self, answer: Answer) -> str:
        """Why the bucket refused its listing, as the source's owner may read it (never the
        credential; S3's error code only, not its message)."""
        code = s3_code(answer.body)
        said = f" ({code})" if code else ""
        if answer.status in (401, 403):
            if code in REFUSED and self.source.secret_env:
                return (f"the bucket refused the request{said}: "
                        f"{REFUSED[code].format(name=self.source.secret_env)}")
            named = (f"the credential in {self.source.secret_env}" if self.source.secret_env
                     else "a credential (this source reads anonymously: name one in its "
                          "credential variable)")
            return f"the bucket refused to list its objects{said}: check {named} and its rights"
        if answer.status == 404:
            return f"no such bucket at {self.bucket}{said}"
        error = _xml(answer.body)
        region = answer.headers.get("x-amz-bucket-region", "") or (
            _child(error, "Region") if error is not None else "")
        if region and re.fullmatch(REGION_PATTERN, region) and region != self.region:
            return f"the bucket is in region {region}, not {self.region}: set the source's region"
        return f"the bucket answered {answer.status}{said}"

    def _request(self, url: str, *, max_bytes: int) -> Answer:
        """One GET (datasets/sources/http.py), asked again where S3 says to try again, each
        try signed anew; httpx2's errors and outbound.AnswerTooLarge as they come."""
        return retried(lambda: bounded_request(self.http, url, self._signed(url),
                                               deadline=self.deadline, max_bytes=max_bytes),
                       deadline=self.deadline)

    def _signed(self, url: str) -> dict[str, str]:
        headers = {"User-Agent": AGENT}
        if self.credential is None:
            return headers
        request = AWSRequest(method="GET", url=url, headers=headers)
        S3SigV4Auth(self.credential, "s3", self.region).add_auth(request)
        return dict(request.headers.items())


def _credential(source: Source) -> Credentials:
    """The source's `<access key id>:<secret access key>` as botocore's credentials."""
    key, _, secret = source_secret(source).partition(":")
    if not key or not secret:
        raise SyncFailed(f"the credential in {source.secret_env} is not <access key id>:"
                         "<secret access key>")
    return Credentials(key, secret)
