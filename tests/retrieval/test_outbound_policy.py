"""The outbound policy where the server fetches: the chat model, the reranker and the
OpenAI-compatible embedder, at save time (a config's chat_base_url) and at use time (the
connection), against real local servers that would answer if they were reached."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from datasets.documents.services import tenant_get_or_create
from kbplatform.processes import free_port
from retrieval.chat import ChatModelError, OpenAIChatModel
from retrieval.index.embedders import EmbeddingError, OpenAIEmbedder
from retrieval.lookup.rerank import HttpReranker, RerankError
from retrieval.ragconfig.config import RagConfigError
from retrieval.ragconfig.services import rag_config_update
from tests.retrieval.chat_server import ChatServer, chat_server
from tests.retrieval.rerank_server import RerankServer, rerank_server
from tests.retrieval.scripted_server import serving

ASK = [{"role": "user", "content": "hello"}]
UNREACHABLE = "the chat model could not be reached"


def bypasses(port: int) -> list[str]:
    """The issue's ways of naming this machine, and the numeric forms the socket library reads
    as 127.0.0.1 too."""
    return [f"http://127.0.0.1:{port}/v1", f"http://localhost:{port}/v1",
            f"http://0x7f000001:{port}/v1", f"http://2130706433:{port}/v1",
            f"http://127.1:{port}/v1", f"http://0177.0.0.1:{port}/v1",
            f"http://user:pass@127.0.0.1:{port}/v1", f"http://[::ffff:127.0.0.1]:{port}/v1",
            f"http://[::1]:{port}/v1", f"http://127.0.0.1.:{port}/v1"]


ELSEWHERE = ["http://169.254.169.254/latest", "http://metadata.google.internal/v1",
             "http://[fd00:ec2::254]/v1", "http://10.0.0.7:8000/v1", "http://192.168.1.1/v1",
             "http://172.16.0.1/v1", "http://100.64.0.1/v1", "http://[fe80::1]/v1",
             "http://[fc00::1]/v1", "http://0.0.0.0:80/v1", "http://224.0.0.1/v1",
             "ftp://chat.example.com/v1"]


def model(url: str, timeout_s: float = 3.0) -> OpenAIChatModel:
    return OpenAIChatModel(base_url=url, api_key="sk-tenant-secret", model="m",
                           timeout_s=timeout_s, max_tokens=50)


@pytest.fixture
def listening() -> Iterator[ChatServer]:
    """A chat server on loopback that the policy does not allow: it must hear nothing."""
    with chat_server(allowed=False) as server:
        yield server


@pytest.mark.django_db
def test_every_bypass_form_is_refused_when_a_config_is_saved(listening: ChatServer) -> None:
    tenant = tenant_get_or_create(slug="acme")
    for url in [*bypasses(listening.server_address[1]), *ELSEWHERE]:
        with pytest.raises(RagConfigError) as refused:
            rag_config_update(config=None, tenant=tenant, values={"chat_base_url": url},
                              changed_by="staff")
        message = refused.value.errors.get("chat_base_url", "")
        assert "refused by the outbound policy" in message or "http(s)" in message, url
    assert listening.requests == []


@pytest.mark.django_db
def test_the_config_form_says_why_beside_the_field(admin_client: Any,
                                                   listening: ChatServer) -> None:
    from django.urls import reverse

    from tests.retrieval.admin.test_ragconfig import form_data

    tenant = tenant_get_or_create(slug="acme")
    page = admin_client.post(reverse("admin:retrieval_ragconfig_add"), form_data(
        tenant, chat_base_url=f"http://2130706433:{listening.server_address[1]}/v1"))
    html = page.content.decode()
    assert page.status_code == 200 and "errornote" in html
    assert "refused by the outbound policy: 2130706433 is a loopback address" in html


def test_every_bypass_form_is_refused_when_connecting(listening: ChatServer) -> None:
    for url in bypasses(listening.server_address[1]):
        with pytest.raises(ChatModelError) as failed:
            model(url).complete(ASK, timeout_s=3)
        assert str(failed.value) == UNREACHABLE, url
    assert listening.requests == []  # not one request, not one key


def test_a_name_that_resolves_to_loopback_is_refused_when_connecting(
        listening: ChatServer) -> None:
    name = socket.gethostname()  # in /etc/hosts as 127.0.0.1 on these machines
    if {info[4][0] for info in socket.getaddrinfo(name, None)} != {"127.0.0.1"}:
        pytest.skip(f"{name} does not resolve to 127.0.0.1 here")
    with pytest.raises(ChatModelError, match=UNREACHABLE):
        model(f"http://{name}:{listening.server_address[1]}/v1").complete(ASK, timeout_s=3)
    assert listening.requests == []


@pytest.mark.django_db
def test_a_name_saved_while_public_is_checked_again_when_connecting(
        listening: ChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS rebinding: the name passes the save (names are resolved when connecting), then
    resolves to loopback; the connection is refused, the server hears nothing."""
    url = f"http://rebind.example:{listening.server_address[1]}/v1"
    rag_config_update(config=None, tenant=tenant_get_or_create(slug="acme"),
                      values={"chat_base_url": url}, changed_by="staff")
    real = socket.getaddrinfo

    def rebound(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "rebind.example" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebound)
    with pytest.raises(ChatModelError, match=UNREACHABLE):
        model(url).complete(ASK, timeout_s=3)
    assert listening.requests == []


def test_an_allowed_host_is_reached(listening: ChatServer, settings: Any) -> None:
    port = listening.server_address[1]
    settings.KB_OUTBOUND_ALLOWED_HOSTS = [f"127.0.0.1:{port + 1}"]  # another port only
    with pytest.raises(ChatModelError, match=UNREACHABLE):
        model(listening.url).complete(ASK, timeout_s=3)
    assert listening.requests == []

    for allowed in ("127.0.0.1", f"127.0.0.1:{port}"):
        settings.KB_OUTBOUND_ALLOWED_HOSTS = ["models.example", allowed]
        reply = model(listening.url).complete(ASK, timeout_s=3)
        assert reply.text
    assert len(listening.requests) == 2
    assert listening.requests[0]["authorization"] == "Bearer sk-tenant-secret"


@contextmanager
def silent_port() -> Iterator[int]:
    """A port whose connections never complete: a listening socket whose queue is full."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    port = sock.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield port
    finally:
        for filler in fillers:
            filler.close()
        sock.close()


def test_every_unreachable_case_says_the_same(listening: ChatServer, settings: Any) -> None:
    """Refused by the policy, a closed port, a name that does not resolve, TLS to a plain HTTP
    server, a connection that never completes: one message, so nothing maps the ports."""
    port = listening.server_address[1]
    refused = model(listening.url)
    settings.KB_OUTBOUND_ALLOWED_HOSTS = [f"127.0.0.1:{free_port()}", "no-such-host.invalid",
                                          f"127.0.0.1:{port}"]
    closed = model(f"http://{settings.KB_OUTBOUND_ALLOWED_HOSTS[0]}/v1")
    nameless = model("http://no-such-host.invalid/v1")
    tls = model(f"https://127.0.0.1:{port}/v1")
    messages = set()
    for case in (closed, nameless, tls):
        with pytest.raises(ChatModelError) as failed:
            case.complete(ASK, timeout_s=3)
        messages.add(str(failed.value))
    settings.KB_OUTBOUND_ALLOWED_HOSTS = []
    with pytest.raises(ChatModelError) as failed:
        refused.complete(ASK, timeout_s=3)
    messages.add(str(failed.value))
    with silent_port() as silent:
        settings.KB_OUTBOUND_ALLOWED_HOSTS = [f"127.0.0.1:{silent}"]
        with pytest.raises(ChatModelError) as failed:
            model(f"http://127.0.0.1:{silent}/v1", timeout_s=0.5).complete(ASK, timeout_s=0.5)
        messages.add(str(failed.value))
    assert messages == {UNREACHABLE}
    assert listening.requests == []  # the TLS hello is not a request


class Redirecting(ThreadingHTTPServer):
    """Answers every POST with 307 to `target` (the server's own admin API, say)."""

    daemon_threads = True

    def __init__(self, target: str) -> None:
        super().__init__(("127.0.0.1", 0), _RedirectHandler)
        self.target = target
        self.hits = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _RedirectHandler(BaseHTTPRequestHandler):
    server: Redirecting

    def do_POST(self) -> None:  # noqa: N802 (the http.server API)
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.hits += 1
        self.send_response(307)
        self.send_header("Location", self.server.target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@contextmanager
def redirecting(target: str) -> Iterator[Redirecting]:
    with serving(Redirecting(target)) as server:  # type: ignore[type-var]
        yield server


def test_a_redirect_is_not_followed(settings: Any) -> None:
    with chat_server() as inside, rerank_server() as ranker, \
            redirecting(inside.url + "/chat/completions") as chat_hop, \
            redirecting(ranker.url + "/rerank") as rerank_hop:
        with pytest.raises(ChatModelError, match="answered HTTP 307"):
            model(chat_hop.url).complete(ASK, timeout_s=3)
        with pytest.raises(RerankError, match="answered HTTP 307"):
            HttpReranker(base_url=rerank_hop.url, api_key="", model="m",
                         timeout_s=3).rerank("q", ["a", "b"], top_n=1, timeout_s=3)
        assert (chat_hop.hits, rerank_hop.hits) == (1, 1)
        assert inside.requests == [] and ranker.requests == []  # even allowed, not followed


def test_the_reranker_keeps_to_the_policy(settings: Any) -> None:
    with rerank_server(allowed=False) as refused:
        port = refused.server_address[1]
        messages = set()
        for url in bypasses(port)[:6]:
            with pytest.raises(RerankError) as failed:
                HttpReranker(base_url=url, api_key="k", model="m",
                             timeout_s=3).rerank("q", ["a"], top_n=1, timeout_s=3)
            messages.add(str(failed.value))
        settings.KB_OUTBOUND_ALLOWED_HOSTS = [f"127.0.0.1:{free_port()}"]
        with pytest.raises(RerankError) as failed:
            HttpReranker(base_url=f"http://{settings.KB_OUTBOUND_ALLOWED_HOSTS[0]}/v1",
                         api_key="k", model="m", timeout_s=3).rerank("q", ["a"], top_n=1,
                                                                     timeout_s=3)
        messages.add(str(failed.value))
        assert messages == {"the reranker could not be reached"}
        assert refused.requests == []
        settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
        ranked = HttpReranker(base_url=refused.url, api_key="k", model="m",
                              timeout_s=3).rerank("q", ["a", "b"], top_n=1, timeout_s=3)
        assert len(ranked) == 1 and len(refused.requests) == 1


class Flooding(RerankServer):
    def answer(self, body: dict[str, Any]) -> tuple[int, bytes]:
        return 200, json.dumps({"results": [], "padding": "x" * (2 << 20)}).encode()


def test_an_answer_over_the_bound_is_cut() -> None:
    with serving(Flooding()) as flooding:
        with pytest.raises(RerankError, match="cut"):
            HttpReranker(base_url=flooding.url, api_key="", model="m",
                         timeout_s=3).rerank("q", ["a"], top_n=1, timeout_s=3)


def test_a_trickled_chat_answer_is_cut_at_the_stage_timeout_in_total() -> None:
    with chat_server() as trickling:
        trickling.trickle_s = 0.05  # each byte well within the timeout; the answer in ~20 s
        started = time.monotonic()
        with pytest.raises(ChatModelError, match="did not answer within 0.80 s"):
            model(trickling.url, timeout_s=0.8).complete(ASK, timeout_s=5)
        assert time.monotonic() - started < 2.5


def test_the_embedder_keeps_to_the_policy(listening: ChatServer) -> None:
    embedder = OpenAIEmbedder(base_url=f"http://0x7f000001:{listening.server_address[1]}/v1",
                              api_key="k", model="m", dimensions=8, batch_size=4, timeout=3)
    with pytest.raises(EmbeddingError, match="the embedding endpoint could not be reached"):
        embedder.embed_query("q")
    with pytest.raises(EmbeddingError, match="the embedding endpoint could not be reached"):
        OpenAIEmbedder(base_url=f"http://0177.0.0.1:{listening.server_address[1]}/v1",
                       api_key="k", model="m", dimensions=8, batch_size=4, timeout=3)
    assert listening.requests == []
