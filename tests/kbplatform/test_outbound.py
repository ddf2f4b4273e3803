"""The outbound policy itself: which addresses and URLs it refuses, which hosts the deployment
allows, the system checks of the deployment's own endpoints, and a request's total deadline."""

from __future__ import annotations

import gzip
import ipaddress
import socketserver
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
import pytest

from kbplatform.checks import check_configuration, check_endpoints_resolve
from kbplatform.outbound import address_refusal, client, deadline, url_refusal


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.255.0.9", "10.1.2.3", "172.16.0.1", "192.168.0.1", "169.254.169.254",
    "169.254.170.2", "100.64.0.1", "100.100.100.200", "192.0.0.192", "0.0.0.0", "224.0.0.1",
    "240.0.0.1", "255.255.255.255", "198.18.0.1", "::1", "::", "fe80::1", "fc00::1",
    "fd00:ec2::254", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::7f00:1",
    "2002:7f00:1::1", "2001:db8::1"])
def test_addresses_that_are_not_public_are_refused(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)), address


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2001:4860:4860::8888",
                                     "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is None


def test_urls_are_read_as_the_socket_library_reads_them() -> None:
    for url in ("http://0x7f000001/", "http://2130706433/", "http://127.1/",
                "http://0177.0.0.1/", "http://017700000001/", "http://[::1]/",
                "http://LOCALHOST./", "http://api.localhost/", "http://metadata.google.internal/",
                "http://user:pass@example.com/", "http://@example.com/", "file:///etc/passwd",
                "gopher://example.com/", "http://:80/", "http://[::1/"):
        assert url_refusal(url), url
    assert url_refusal("https://api.openai.com/v1") is None


def test_the_deployment_allows_hosts_by_name_or_name_and_port(settings: Any) -> None:
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1:8000", "LLM.internal", "[::1]:9000",
                                          "10.0.0.5"]
    assert url_refusal("http://127.0.0.1:8000/v1") is None
    assert url_refusal("http://127.0.0.1:8001/v1")
    assert url_refusal("http://llm.internal/v1") is None
    assert url_refusal("http://[::1]:9000/") is None and url_refusal("http://[::1]:9001/")
    assert url_refusal("http://10.0.0.5:1234/") is None
    assert url_refusal("http://user:pw@10.0.0.5/")  # credentials stay refused


def test_E013_a_deployment_endpoint_the_policy_refuses(settings: Any) -> None:
    settings.KB_EMBEDDER = "use"
    settings.KB_CHAT_BASE_URL = "http://127.0.0.1:8000/v1"
    settings.KB_RERANK_BASE_URL = "http://reranker.example.com/v1"
    problems = [p for p in check_configuration() if p.id == "kbplatform.E013"]
    assert len(problems) == 1 and "KB_CHAT_BASE_URL" in problems[0].msg
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1:8000"]
    assert not [p for p in check_configuration() if p.id == "kbplatform.E013"]


def test_W014_check_deploy_resolves_the_endpoints(settings: Any) -> None:
    settings.KB_EMBEDDER = "use"
    settings.KB_RERANK_BASE_URL = ""
    settings.KB_CHAT_BASE_URL = "http://no-such-host.invalid/v1"
    [problem] = check_endpoints_resolve()
    assert problem.id == "kbplatform.W014" and "does not resolve" in problem.msg
    settings.KB_CHAT_BASE_URL = "http://127.0.0.1:8000/v1"
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    assert check_endpoints_resolve() == []


@pytest.fixture
def trickling() -> Iterator[str]:
    """A server on 127.0.0.1 that answers every request one byte every 0.2 s (about 10 s in
    all), the status line and headers too."""
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 20\r\n\r\n"
              + b"x" * 20)

    class Trickle(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(65536)
            try:
                for byte in answer:
                    self.request.sendall(bytes([byte]))
                    time.sleep(0.2)
            except OSError:
                pass  # the client gave up

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_a_deadline_bounds_a_request_in_total_however_slowly_it_trickles(
        settings: Any, trickling: str) -> None:
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    for outer, inner in ((1.0, None), (10.0, 0.5)):  # nested: the earlier end holds
        started = time.monotonic()
        with pytest.raises(httpx2.ReadTimeout), deadline(outer), \
                deadline(inner or outer):
            client().get(trickling, timeout=5)  # each byte comes within 5 s
        assert time.monotonic() - started < min(outer, inner or outer) + 1.0


def test_an_answer_is_never_decompressed_past_the_size_bound(settings: Any) -> None:
    """50 MB of zeros are 50 KB of gzip: the bound counts what arrives, and nothing is
    inflated behind it."""
    bomb = gzip.compress(bytes(50 << 20))
    asked: list[str | None] = []

    class Bomb(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server API)
            asked.append(self.headers.get("Accept-Encoding"))
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(bomb)))
            self.end_headers()
            self.wfile.write(bomb)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Bomb)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    try:
        answer = client(max_response_bytes=1 << 20).get(
            f"http://127.0.0.1:{server.server_address[1]}/", timeout=10)
    finally:
        server.shutdown()
        server.server_close()

    assert asked == ["identity"]
    assert answer.content == bomb  # as it came: a caller fails on it as malformed


def test_no_cookie_a_site_sets_goes_with_a_later_request(settings: Any) -> None:
    """The client serves every tenant's sources: a session cookie one source's site set would
    otherwise go with another's requests to the same host."""
    sent: list[str | None] = []

    class Sessions(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server API)
            sent.append(self.headers.get("Cookie"))
            self.send_response(200)
            self.send_header("Set-Cookie", "JSESSIONID=tenant-a-session; Path=/")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sessions)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    try:
        for _ in range(2):
            client().get(f"http://127.0.0.1:{server.server_address[1]}/", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert sent == [None, None] and not client().cookies
