"""The one door for every server-side fetch (chat, rerank and embedding endpoints, web, git, s3,
confluence, yuque and feishu sources).

A URL may be http(s) only, without credentials in it; its host's addresses — every one the name
resolves to, numeric forms (`0x7f000001`, `2130706433`, `127.1`, `0177.0.0.1`) read as the
socket library reads them, IPv4 inside IPv6 unwrapped — must be public: loopback, link-local,
private, unique-local, carrier-grade NAT, multicast, reserved and cloud metadata addresses are
refused unless the deployment names the host in KB_OUTBOUND_ALLOWED_HOSTS.

Two checks, one policy: `url_refusal` reads a URL without the network (a config's validation
runs it on every read of the config), and `client()`'s transport resolves the host inside the
connection and connects only to the addresses it checked, so a name that resolves elsewhere at
use time (DNS rebinding) is refused too. Redirects are not followed, environment proxies are
not used, no cookie is kept, an answer is never decompressed and is cut at a size bound
(`AnswerTooLarge`), and `deadline()` bounds the requests made inside it in total. Whatever
stops a connection — the policy, DNS, a closed port, TLS, a connect timeout — is the same
`httpx2.ConnectError`, so a caller's error message cannot tell a refused address from a closed
port.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import socket
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import urlsplit

import httpcore2
import httpx2
from django.conf import settings

logger = logging.getLogger(__name__)

SCHEMES = ("http", "https")
# Names that mean this machine or a cloud's instance metadata, whatever DNS says.
LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost",
                         "ip6-loopback", "metadata", "metadata.google.internal",
                         "metadata.goog", "instance-data", "instance-data.ec2.internal"})
# Metadata services on addresses the ranges below do not all cover (Oracle's is "global").
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "192.0.0.192"))
CARRIER_GRADE_NAT = ipaddress.ip_network("100.64.0.0/10")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
UNREACHABLE = "could not connect"  # the one message of every refused or failed connection

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class OutboundRefused(ValueError):
    """The policy refuses a URL or an address. The reason is for the operator (a system
    check, a config form's field error, the log), never for the caller of a request."""


def address_refusal(address: Address) -> str | None:
    """Why `address` may not be connected to, or None when it is a public address."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (
            ipaddress.IPv4Address(int(address) & 0xFFFFFFFF) if address in NAT64 else None)
        if embedded is not None:
            return address_refusal(embedded)
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    kinds = (("an unspecified", address.is_unspecified), ("a loopback", address.is_loopback),
             ("a link-local", address.is_link_local), ("a multicast", address.is_multicast),
             ("a carrier-grade NAT", address in CARRIER_GRADE_NAT),
             ("a reserved", address.is_reserved), ("a private", address.is_private))
    for kind, hit in kinds:
        if hit:
            return f"{kind} address"
    return None if address.is_global else "not a public address"


def url_allowed(url: str) -> bool:
    """Is the URL's host one KB_OUTBOUND_ALLOWED_HOSTS names (on any port or the URL's)?"""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return False
    return _allowed(parts.hostname or "", port)


def _allowed(host: str, port: int | None) -> bool:
    """Is `host` (as the URL names it) one the deployment allows, on any port or this one?"""
    host = _bare(host)
    for entry in settings.KB_OUTBOUND_ALLOWED_HOSTS:
        entry = entry.strip().lower()
        name, _, entry_port = (entry[1:].partition("]") if entry.startswith("[")
                               else entry.rpartition(":") if entry.count(":") == 1
                               else (entry, "", ""))
        entry_port = entry_port.lstrip(":")
        if _bare(name) == host and (not entry_port or entry_port == str(port)):
            return True
    return False


def _bare(host: str) -> str:
    return host.strip().lower().strip("[]").rstrip(".")


def _numeric(host: str) -> Address | None:
    """The address a numeric host means to the socket library (all of inet_aton's forms),
    without asking DNS; None for a name."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM,
                                   flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError, ValueError):
        return None
    return ipaddress.ip_address(str(found[0][4][0]).partition("%")[0])


def host_refusal(host: str, port: int | None) -> str | None:
    """Why the policy refuses `host` without resolving a name, or None."""
    if _allowed(host, port):
        return None
    bare = _bare(host)
    if not bare:
        return "the URL names no host"
    if bare in LOCAL_NAMES or bare.endswith((".localhost", ".internal")):
        return f"{bare} names this machine or a metadata service"
    address = _numeric(bare)
    refusal = address_refusal(address) if address is not None else None
    return f"{bare} is {refusal}" if refusal else None


def url_refusal(url: str) -> str | None:
    """Why the policy refuses `url`, read without the network (a name's addresses are checked
    when connecting), or None."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return "not a valid URL"
    if parts.scheme.lower() not in SCHEMES:
        return "only http:// and https:// URLs are fetched"
    if "@" in parts.netloc:
        return "a URL may not carry a user name or password"
    return host_refusal(parts.hostname or "", port)


def resolved_addresses(host: str, port: int) -> list[Address]:
    """Every address `host` resolves to, each one checked; OutboundRefused when the name does
    not resolve or one address is refused (a name may not mix public and private ones)."""
    refusal = host_refusal(host, port)
    if refusal:
        raise OutboundRefused(refusal)
    try:
        found = socket.getaddrinfo(_bare(host), port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise OutboundRefused(f"{host} does not resolve ({exc})") from None
    addresses = list(dict.fromkeys(
        ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in found))
    if not _allowed(host, port):
        for address in addresses:
            why = address_refusal(address)
            if why:
                raise OutboundRefused(f"{host} resolves to {address}, {why}")
    return addresses


def check_url(url: str) -> list[Address]:
    """The whole policy for `url`, its name resolved now: the addresses it may connect to (a
    client that connects by itself, git, is pinned to them); raises OutboundRefused with the
    reason."""
    refusal = url_refusal(url)
    if refusal:
        raise OutboundRefused(refusal)
    parts = urlsplit(url.strip())
    return resolved_addresses(parts.hostname or "", url_port(url))


def url_port(url: str) -> int:
    """The port a connection to `url` (a URL the policy took) goes to."""
    parts = urlsplit(url.strip())
    return parts.port or (443 if parts.scheme.lower() == "https" else 80)


# The monotonic time by which the requests of this context must have ended (`deadline()`).
_deadline: ContextVar[float | None] = ContextVar("outbound_deadline", default=None)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every request made inside ends within `seconds` in all — connecting, sending, the
    headers and the body, however slowly the server trickles them: each socket operation
    waits at most the time left (httpx's own timeout bounds each operation, not their sum).
    Nested, the earlier end holds."""
    at = time.monotonic() + seconds
    outer = _deadline.get()
    token = _deadline.set(at if outer is None else min(outer, at))
    try:
        yield
    finally:
        _deadline.reset(token)


def _left(timeout: float | None, late: type[Exception]) -> float | None:
    """`timeout` cut to the time left before the deadline; `late` raised once it passed."""
    at = _deadline.get()
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise late("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore2.NetworkStream):
    """The connection's stream, each operation within the deadline; a failed TLS handshake, a
    timeout included, is UNREACHABLE."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        try:
            return _Stream(self._inner.start_tls(ssl_context, server_hostname,
                                                 _left(timeout, httpcore2.ConnectTimeout)))
        except (httpcore2.ConnectError, httpcore2.ConnectTimeout):
            raise httpcore2.ConnectError(UNREACHABLE) from None

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore2.NetworkBackend):
    """Resolves the host inside the connection and connects only to the addresses checked."""

    def __init__(self) -> None:
        self._inner = httpcore2.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        try:
            addresses = resolved_addresses(host, port)
        except OutboundRefused as exc:
            logger.warning("outbound request to %s:%s refused: %s", host, port, exc)
            raise httpcore2.ConnectError(UNREACHABLE) from None
        for address in addresses:
            try:
                return _Stream(self._inner.connect_tcp(
                    str(address), port, timeout=_left(timeout, httpcore2.ConnectTimeout),
                    local_address=local_address, socket_options=socket_options))
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout):
                continue
        raise httpcore2.ConnectError(UNREACHABLE)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None
                            ) -> httpcore2.NetworkStream:
        raise httpcore2.ConnectError(UNREACHABLE)


class AnswerTooLarge(httpx2.ReadError):
    """An answer cut at the client's size bound."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is over {limit} bytes")
        self.limit = limit


class _Bounded(httpx2.SyncByteStream):
    """An answer's body, cut with AnswerTooLarge past `limit` bytes."""

    def __init__(self, inner: httpx2.SyncByteStream, limit: int, url: httpx2.URL) -> None:
        self._inner, self._limit, self._url = inner, limit, url

    def __iter__(self) -> Iterator[bytes]:
        read = 0
        for chunk in self._inner:
            read += len(chunk)
            if read > self._limit:
                logger.warning("the answer of %s is over %d bytes: cut", self._url.host,
                               self._limit)
                raise AnswerTooLarge(self._limit)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class _Transport(httpx2.HTTPTransport):
    """httpx's own transport over the checking backend; http(s) only, no credentials in the
    URL, each answer bounded."""

    def __init__(self, *, max_response_bytes: int) -> None:
        # HTTPTransport takes no network backend: build its connection pool (all that
        # handle_request and close use) around ours, its TLS context without the environment.
        self._pool = httpcore2.ConnectionPool(
            ssl_context=httpx2.create_ssl_context(trust_env=False), network_backend=_Backend(),
            max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)
        self._max_response_bytes = max_response_bytes

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.scheme not in SCHEMES or request.url.userinfo:
            raise httpx2.ConnectError(UNREACHABLE, request=request)
        # The size bound counts the bytes that arrive: an answer is never decompressed (200 KB
        # of gzip are 200 MB decoded). Asked uncompressed; sent compressed anyway, it is
        # handed over as it came, and fails as malformed.
        request.headers["Accept-Encoding"] = "identity"
        response = super().handle_request(request)
        response.headers.pop("Content-Encoding", None)
        assert isinstance(response.stream, httpx2.SyncByteStream)
        response.stream = _Bounded(response.stream, self._max_response_bytes, request.url)
        return response


@functools.cache
def client(*, max_response_bytes: int = 4 << 20) -> httpx2.Client:
    """The process's HTTP client for outbound requests (thread-safe, pooled): through the
    policy, no redirects followed, no environment proxies or .netrc, and no cookie kept (the
    client serves every tenant: a session one site set for one source must not go with
    another's requests); each call sets its own timeout."""
    return httpx2.Client(transport=_Transport(max_response_bytes=max_response_bytes),
                         follow_redirects=False, trust_env=False,
                         cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])))
