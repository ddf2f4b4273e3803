"""Real parts for the sources' tests: a git repository made with the `git` CLI, a web site
served from a thread (robots.txt, ETag, sitemap), sources made through the service."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from datasets.models import Document, Job, Source
from datasets.sources.services import source_create, source_sync_request


class Repo:
    """A git repository in a folder, changed and committed by the test."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-c", "user.email=t@example.org", "-c", "user.name=t",
                               "-C", str(self.path), *args], check=True, capture_output=True,
                              text=True, timeout=60).stdout.strip()

    def write(self, files: dict[str, bytes]) -> None:
        for name, raw in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(raw)

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")


def doc(title: str, body: str = "") -> bytes:
    return f"# {title}\n\n{body or f'All about {title}.'}\n".encode()


def make_source(dataset: Any, **fields: Any) -> Source:
    return source_create(dataset=dataset, **{"name": "src", **fields})


def sync_counts(job: Job) -> tuple[int, ...]:
    """(added, changed, unchanged, deleted, failed) of a sync's job."""
    return tuple(job.detail.get(k, 0) for k in ("added", "changed", "unchanged", "deleted",
                                                 "failed"))


def live_paths(source: Source) -> set[str]:
    """The paths of the source's documents that are not deleted."""
    return set(Document.objects.filter(source=source, deleted=False)
               .values_list("source_path", flat=True))


def sync(source: Source) -> Job:
    """A sync through the job and its task (run in-process by the tests' eager tasks)."""
    job = source_sync_request(source=source)
    job.refresh_from_db()
    return job


def timed_sync(source: Source, seconds: list[float]) -> Job:
    """`sync(source)`, its wall time added to `seconds` (the figures of docs/benchmarks.md)."""
    started = time.monotonic()
    job = sync(source)
    seconds.append(time.monotonic() - started)
    return job


@dataclass
class Site:
    """What the web server serves: path -> (content type, body); hits by path."""

    pages: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    robots: str = ""
    hits: list[tuple[str, int]] = field(default_factory=list)  # (path, status)
    gate: threading.Event | None = None  # set: pages are answered; clear: held
    trickle: dict[str, float] = field(default_factory=dict)  # path -> seconds between bytes
    on_hit: Callable[[], None] | None = None  # called as each request arrives
    url: str = ""


@contextmanager
def web_site(site: Site) -> Iterator[Site]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server API)
            path = self.path
            if site.on_hit is not None:
                site.on_hit()
            if site.gate is not None and path != "/robots.txt":
                site.gate.wait(30)
            if path == "/robots.txt":
                self._answer(200 if site.robots else 404, "text/plain", site.robots.encode())
                return
            if path not in site.pages:
                self._answer(404, "text/plain", b"not found")
                return
            kind, body = site.pages[path]
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            if self.headers.get("If-None-Match") == etag:
                self._answer(304, kind, b"", etag)
                return
            self._answer(200, kind, body, etag)

        def _answer(self, status: int, kind: str, body: bytes, etag: str = "") -> None:
            site.hits.append((self.path, status))
            if self.path in site.trickle:
                self._trickle(status, kind, body, site.trickle[self.path])
                return
            self.send_response(status)
            self.send_header("Content-Type", kind)
            if etag:
                self.send_header("ETag", etag)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def _trickle(self, status: int, kind: str, body: bytes, seconds: float) -> None:
            """The whole answer, status line and headers too, one byte at a time."""
            raw = (f"HTTP/1.1 {status} OK\r\nContent-Type: {kind}\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
            try:
                for byte in raw:
                    self.wfile.write(bytes([byte]))
                    time.sleep(seconds)
            except OSError:
                pass  # the client gave up: what the test expects
            self.close_connection = True

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    site.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield site
    finally:
        if site.gate is not None:
            site.gate.set()
        server.shutdown()
        server.server_close()


@dataclass
class GitHost:
    """A git host over smart HTTP (git's own `git http-backend`, as GitHub, GitLab and Gitea
    speak it) that asks for HTTP Basic of `user:token` (any user) on every request; each
    request's path and status in `hits`."""

    root: Path
    token: str
    url: str = ""
    hits: list[tuple[str, int]] = field(default_factory=list)
    seen_authorization: list[str] = field(default_factory=list)
    # Answer with an error page quoting what the request sent (a careless proxy's).
    echo: bool = False


@contextmanager
def git_host(host: GitHost) -> Iterator[GitHost]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            given = self.headers.get("Authorization", "")
            host.seen_authorization.append(given)
            token = ""
            if given.startswith("Basic "):
                token = base64.b64decode(given[6:]).decode().partition(":")[2]
            if host.echo:
                page = f"bad gateway; you sent {given} ({token})".encode()
                host.hits.append((self.path, 502))
                self.send_response(502)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                return
            if token != host.token:
                host.hits.append((self.path, 401))
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            parts = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                   "GIT_PROJECT_ROOT": str(host.root), "GIT_HTTP_EXPORT_ALL": "1",
                   "PATH_INFO": parts.path, "QUERY_STRING": parts.query,
                   "REQUEST_METHOD": self.command, "REMOTE_USER": "kb",
                   "REMOTE_ADDR": "127.0.0.1", "CONTENT_LENGTH": str(len(body)),
                   "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                   "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                   "GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
            out = subprocess.run(["git", "http-backend"], input=body, env=env,
                                 capture_output=True, timeout=60).stdout
            head, _, payload = out.partition(b"\r\n\r\n")
            if not payload and b"\n\n" in out:
                head, _, payload = out.partition(b"\n\n")
            headers = [line.split(":", 1) for line in head.decode().splitlines() if ":" in line]
            status = next((int(v.split()[0]) for k, v in headers if k.lower() == "status"), 200)
            host.hits.append((self.path, status))
            self.send_response(status)
            for name, value in headers:
                if name.lower() != "status":
                    self.send_header(name, value.strip())
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _answer  # noqa: N815 (the http.server API)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield host
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Bucket:
    """A real S3 server on 127.0.0.1 (moto's, served by werkzeug) that counts what it is asked,
    checks each request's Signature Version 4 against `access_key` and `secret_key` as S3 does
    (moto does not: InvalidAccessKeyId, SignatureDoesNotMatch), and answers the statuses queued
    in `faults` (for a request whose path and query hold the key) first; a 200 there is a page
    that is no S3 answer (a portal's login page)."""

    access_key: str
    secret_key: str
    url: str = ""
    client: Any = None  # boto3's, signed with `access_key`: how the test fills the bucket
    hits: list[tuple[str, int]] = field(default_factory=list)  # ("<path>?<query>", status)
    faults: dict[str, list[int]] = field(default_factory=dict)

    def object_reads(self) -> list[str]:
        """The objects read (GET of a key, not a listing), by path."""
        return [hit for hit, _ in self.hits if "list-type=2" not in hit]

    def put(self, bucket: str, files: dict[str, bytes]) -> None:
        for key, raw in files.items():
            self.client.put_object(Bucket=bucket, Key=key, Body=raw)


S3_ERROR = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>"
            "{code}</Message><RequestId>0</RequestId></Error>")


@contextmanager
def s3_server(bucket: Bucket) -> Iterator[Bucket]:
    import boto3
    from moto.backends import get_backend
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    inner = DomainDispatcherApplication(create_backend_app)

    def refuse(start_response: Callable[..., Any], status: int, code: str) -> list[bytes]:
        if status == 200:
            start_response("200 OK", [("Content-Type", "text/html")])
            return [b"<html><body><form>Sign in to the storage portal</form></body></html>"]
        start_response(f"{status} {code}", [("Content-Type", "application/xml"),
                                            ("Retry-After", "0")])
        return [S3_ERROR.format(code=code).encode()]

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        asked = f"{environ['PATH_INFO']}?{environ.get('QUERY_STRING', '')}"
        reading = environ["REQUEST_METHOD"] == "GET"
        refusal = _signature_refusal(environ, bucket)
        if refusal:
            if reading:
                bucket.hits.append((asked, 403))
            return refuse(start_response, 403, refusal)
        for marker, statuses in bucket.faults.items():
            if marker in asked and statuses:
                status = statuses.pop(0)
                bucket.hits.append((asked, status))
                return refuse(start_response, status, "SlowDown" if status == 503 else
                              "AccessDenied" if status == 403 else "InternalError")
        if reading:
            bucket.hits.append((asked, 200))
        return inner(environ, start_response)

    class Quiet(MotoRequestHandler):
        def log_request(self, *args: Any) -> None:
            """Its hits are counted; the log would print each of hundreds."""

    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    bucket.url = f"http://127.0.0.1:{server.server_port}"
    bucket.client = boto3.client("s3", endpoint_url=bucket.url, region_name="us-east-1",
                                 aws_access_key_id=bucket.access_key,
                                 aws_secret_access_key=bucket.secret_key)
    try:
        yield bucket
    finally:
        server.shutdown()
        thread.join(timeout=10)
        get_backend("s3").reset()  # moto keeps its buckets in the process


def _signature_refusal(environ: dict[str, Any], bucket: Bucket) -> str:
    """S3's error code for a request whose Signature Version 4 is not the one `bucket`'s keys
    give the request as it arrived (its raw path and query, the headers it signed), or ""."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    found = re.fullmatch(r"AWS4-HMAC-SHA256 Credential=([^/]+)/\d{8}/([^/]+)/s3/aws4_request, "
                         r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})",
                         environ.get("HTTP_AUTHORIZATION", ""))
    if found is None or found.group(1) != bucket.access_key:
        return "InvalidAccessKeyId"
    region, signed, signature = found.group(2), found.group(3).split(";"), found.group(4)
    headers = {name: environ.get(name.upper().replace("-", "_") if name in (
        "content-type", "content-length") else f"HTTP_{name.upper().replace('-', '_')}", "")
               for name in signed}
    request = AWSRequest(method=environ["REQUEST_METHOD"],
                         url=f"http://{environ['HTTP_HOST']}{environ['RAW_URI']}",
                         headers=headers)
    request.context["timestamp"] = headers.get("x-amz-date", "")
    auth = S3SigV4Auth(Credentials(bucket.access_key, bucket.secret_key), "s3", region)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)),
                              request)
    return "" if expected == signature else "SignatureDoesNotMatch"
