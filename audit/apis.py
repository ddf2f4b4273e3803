"""The trace API: people replay a session's tool calls (seed 000 §9.1)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.models import ToolInvocation
from audit.selectors import session_trace
from datasets.apis import caller
from datasets.auth import IsAdminKey


class SessionTraceApi(APIView):
    # Admin keys only: the trace is for people, and the agent's tool key must never read it.
    permission_classes = [IsAdminKey]

    class OutputSerializer(serializers.ModelSerializer[ToolInvocation]):
        retrievalDetails = serializers.SerializerMethodField()

        class Meta:
            model = ToolInvocation
            fields = ["tool_call_id", "created_at", "latency_ms", "outcome", "relevance_level",
                      "evidence_status", "returned_count", "error", "retrievalDetails"]

        def get_retrievalDetails(self, row: ToolInvocation) -> Any:
            return row.details.get("retrievalDetails")

    def get(self, request: Request, session_id: str) -> Response:
        rows = session_trace(tenant_id=caller(request).tenant.pk, session_id=session_id)
        if not rows:
            # Another tenant's session looks exactly like one that does not exist.
            raise NotFound("no tool invocations for this session")
        return Response({"session_id": session_id,
                         "toolInvocations": self.OutputSerializer(rows, many=True).data})
