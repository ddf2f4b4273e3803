"""The trace API: people replay a session's tool calls (seed 000 §9.1)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
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

from audit.cited import cited_report
from audit.models import ToolInvocation
from audit.selectors import session_trace
from datasets.documents.selectors import MAX_DB_ID
from datasets.tenancy.keys import IsAdminKey, caller
from kbplatform.errors import ApiError, ErrorCode, NotFound
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


class CitedRatesApi(APIView):
    """The cited rates of the caller's tenant (a dataset-scoped key: of its datasets)."""

    permission_classes = [IsAdminKey]

    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        dataset_id = serializers.IntegerField(min_value=1, max_value=MAX_DB_ID, required=False)
        days = serializers.IntegerField(min_value=1, max_value=3650, required=False)

    @extend_schema(
        operation_id="cited_rates", summary="Cited rates of served evidence (audit)",
        description="Admin keys. Of the evidence lookups and answers served as READY: how "
                    "much was cited (confirmed by the evidence guard or the call's own answer) "
                    "and rated helpful / not helpful; per config version, rank, dataset and "
                    "document; an A/B test's arms: GET /api/rag/experiments/{id}/cited-rates.",
        parameters=[InputSerializer],
        responses={200: OpenApiTypes.OBJECT, **errors(400, 401, 403, 503)})
    def get(self, request: Request) -> Response:
        who = caller(request)
        data = self.InputSerializer(data=request.query_params)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        scope = who.writable_dataset_ids() if who.is_scoped else None
        if "dataset_id" in values:
            if values["dataset_id"] not in who.writable_dataset_ids():
                raise ApiError("no such dataset for this key", code=ErrorCode.UNKNOWN_DATASET)
            scope = [values["dataset_id"]]
        return Response(cited_report(tenant_id=who.tenant.pk, dataset_ids=scope,
                                     days=values.get("days")).as_dict())
