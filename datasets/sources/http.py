"""What the sources that speak HTTP share (web, s3, confluence, yuque, feishu): one request through
kbplatform/outbound.py, ended within KB_SOURCE_HTTP_TIMEOUT_SECONDS and the sync's time left
in all (a server trickling its headers or body holds it no longer), its body read to a bound;
and the retries an API documents for "slow down" and "try again" answers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
from django.conf import settings

from datasets.models import Source
from datasets.sources.base import Deadline, ItemFailed, SyncFailed
from datasets.sources.secrets import source_secret
from kbplatform import outbound

AGENT = "kbplatform"
# Too many requests, and the server errors S3 and Atlassian document as worth another try.
RETRIED = (429, 500, 502, 503, 504)
ATTEMPTS = 4
MAX_WAIT_SECONDS = 20.0


@dataclass(frozen=True)
class Answer:
    """An answer, its body read within the bounds."""

    status: int
    headers: httpx2.Headers
    body: bytes


def bounded_request(http: httpx2.Client, url: str, headers: Mapping[str, str], *,
                    deadline: Deadline, max_bytes: int, posted: Any = None) -> Answer:
    """One GET (a POST of `posted` as JSON, when given); outbound.AnswerTooLarge past
    `max_bytes`, httpx2's errors otherwise."""
    bound = min(settings.KB_SOURCE_HTTP_TIMEOUT_SECONDS, deadline.left())
    method = "GET" if posted is None else "POST"
    with outbound.deadline(bound), http.stream(method, url, headers=dict(headers), json=posted,
                                               timeout=bound) as response:
        body = bytearray()
        for chunk in response.iter_raw():
            body += chunk
            if len(body) > max_bytes:
                raise outbound.AnswerTooLarge(max_bytes)
        return Answer(response.status_code, response.headers, bytes(body))


def retried(get: Callable[[], Answer], *, deadline: Deadline) -> Answer:
    """`get()`'s answer, asked again (ATTEMPTS in all) while it is one of RETRIED, waiting as
    its Retry-After says or 0.5, 1, 2 s, as long as the wait ends within the sync's time."""
    for attempt in range(ATTEMPTS):
        answer = get()
        if answer.status not in RETRIED or attempt == ATTEMPTS - 1:
            return answer
        wait = _retry_after(answer)
        wait = 0.5 * 2 ** attempt if wait is None else wait
        if wait > MAX_WAIT_SECONDS or not deadline.allows(wait):
            return answer
        time.sleep(wait)
    raise AssertionError("unreachable")


def _retry_after(answer: Answer) -> float | None:
    """Retry-After in seconds (an HTTP date is taken as no hint), or Feishu's
    x-ogw-ratelimit-reset (the seconds until its window resets)."""
    for header in ("retry-after", "x-ogw-ratelimit-reset"):
        try:
            return max(0.0, float(answer.headers.get(header, "")))
        except ValueError:
            continue
    return None


def api_request(http: httpx2.Client, url: str, headers: Mapping[str, str], *,
                deadline: Deadline, max_bytes: int, site: str, item: bool = False,
                posted: Any = None) -> Answer:
    """A request of a site's API (`site`: how its owner names it, "Confluence"), asked again where
    the API says to; a failure is one file's line of the log (`item`) or the sync's, and a
    site that stops answering stops the sync."""
    failed = ItemFailed if item else SyncFailed
    try:
        return retried(lambda: bounded_request(http, url, headers, deadline=deadline,
                                               max_bytes=max_bytes, posted=posted),
                       deadline=deadline)
    except outbound.AnswerTooLarge as exc:
        raise failed(f"an answer over {exc.limit} bytes") from None
    except httpx2.TimeoutException:
        raise failed(f"{site} did not answer in time (KB_SOURCE_HTTP_TIMEOUT_SECONDS)") from None
    except httpx2.InvalidURL:
        raise failed("a URL the site's answer led to is not one") from None
    except httpx2.HTTPError:
        raise SyncFailed(f"could not connect to {urlsplit(url).netloc}") from None


def api_json(answer: Answer, site: str) -> Any:
    """The answer's JSON; SyncFailed when it is none."""
    try:
        return json.loads(answer.body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise SyncFailed(f"{site}'s answer is not JSON") from None


def header_secret(source: Source, noun: str = "credential") -> str:
    """The source's credential (datasets/sources/secrets.py), one an HTTP header can carry."""
    secret = source_secret(source)
    if not secret.isascii():
        raise SyncFailed(f"the {noun} in {source.secret_env} holds a character an HTTP header "
                         "cannot carry")
    return secret
