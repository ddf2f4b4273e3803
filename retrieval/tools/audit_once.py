"""Exactly one audit row per call of an audited tool, over REST and MCP alike: the answer's
(READY, EMPTY, UNAVAILABLE), or the first failure's, a refused key and invalid input
included."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from audit.services import invocation_record
from datasets.models import ApiKey
from datasets.tenancy.keys import Caller
from retrieval.tools.calls import ToolCall
from retrieval.tools.registry import Tool


class AuditOnce:
    """One call of `tool` over `channel`; started when the call arrives, before
    authentication: a refusal has a latency too."""

    def __init__(self, tool: Tool, *, channel: str) -> None:
        self.tool = tool
        self.channel = channel
        self.started = time.perf_counter()
        self.pending = tool.audited  # a tool that is not audited writes no row at all

    def run(self, who: Caller, arguments: Any) -> ToolCall:
        """Validate, call, then write the answer's row: last, so that anything raising
        before it is audited once, by `failed`."""
        valid, person = self.tool.valid(arguments)
        who = who.acting_for(person)
        done = self.tool.call(who, valid)
        if self.pending:
            record = done.record
            if record is not None and person is not None:
                # Whom it was for: how many principals and a keyed hash, never a name.
                record = replace(record, details={**record.details,
                                                  "on_behalf_of": person.audited()})
            invocation_record(api_key=who.api_key, result=record, channel=self.channel,
                              latency_ms=self._elapsed_ms())
            self.pending = False
        return done

    def failed(self, error: Exception, *, api_key: Callable[[], ApiKey | None],
               payload: Callable[[], Mapping[str, Any] | None]) -> None:
        """The failure's row, unless the call has one. Lazy: the key and the input are only
        looked for when a row is written."""
        if not self.pending:
            return
        key = api_key()
        # A stranger's input is not kept: no tenant could trace its ids anyway.
        invocation_record(api_key=key, payload=payload() if key else None, error=error,
                          tool_name=self.tool.name, channel=self.channel,
                          latency_ms=self._elapsed_ms())
        self.pending = False

    def _elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000
