"""The trace API: people replay a session's tool calls (seed 000 §9.1)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import (
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.models import ToolInvocation
from audit.selectors import session_trace
from datasets.auth import IsAdminKey, caller
from kbplatform.errors import NotFound
from kbplatform.openapi import errors, path_id


class SessionTraceApi(APIView):
    # Admin keys only: the trace is for people, and the agent's tool key must never read it.
    permission_classes = [IsAdminKey]

    @extend_schema_serializer(component_name="ToolInvocationTrace")
    class OutputSerializer(serializers.ModelSerializer[ToolInvocation]):
        retrievalDetails = serializers.SerializerMethodField()

        class Meta:
            model = ToolInvocation
            fields = ["tool_call_id", "created_at", "latency_ms", "outcome", "relevance_level",
                      "evidence_status", "returned_count", "error", "retrievalDetails"]
            read_only_fields = fields

        @extend_schema_field({"type": "object", "additionalProperties": {}, "nullable": True,
                              "description": "How the answer was made: filters, hints, retry, "
                                             "stages with candidate scores, pack, timings. "
                                             "Null for a call that failed before a result."})
        def get_retrievalDetails(self, row: ToolInvocation) -> Any:
            return row.details.get("retrievalDetails")

    @extend_schema(
        operation_id="session_trace", summary="Replay a session's tool calls (audit)",
        description="Admin keys. Oldest first; at most the latest 1000 calls.",
        parameters=[path_id("session_id", "The `session_id` the lookups were sent with.")],
        responses={200: inline_serializer("SessionTrace", {
            "session_id": serializers.CharField(),
            "toolInvocations": OutputSerializer(many=True)}),
            **errors(401, 403, 404, 503,
                     e404="No tool calls of this session that the key may see.")})
    def get(self, request: Request, session_id: str) -> Response:
        who = caller(request)
        rows = session_trace(
            tenant_id=who.tenant.pk, session_id=session_id, api_key_id=who.api_key.pk,
            dataset_ids=who.writable_dataset_ids() if who.is_scoped else None)
        if not rows:
            # Another tenant's session looks exactly like one that does not exist.
            raise NotFound("no tool invocations for this session")
        return Response({"session_id": session_id,
                         "toolInvocations": self.OutputSerializer(rows, many=True).data})
