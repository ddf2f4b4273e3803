"""The tool endpoint and the evidence guard."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.canonical import canonical_store, ready_evidence
from audit.services import invocation_record
from datasets.apis import caller
from retrieval.lookup_service import lookup_knowledge, lookup_scope
from retrieval.project import RagResultProjector
from retrieval.types import EvidenceStatus

IDENT = r"^[A-Za-z0-9_.:\-]{1,128}$"


class LookupKnowledgeApi(APIView):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        query = serializers.CharField(trim_whitespace=True, max_length=settings.KB_MAX_QUERY_CHARS)
        tool_call_id = serializers.RegexField(IDENT, required=False)
        session_id = serializers.RegexField(IDENT, required=False)
        dataset_ids = serializers.ListField(child=serializers.IntegerField(min_value=1),
                                            required=False, max_length=100)

    def post(self, request: Request) -> Response:
        started = time.perf_counter()
        who = caller(request)
        data = self.InputSerializer(data=request.data)
        try:
            data.is_valid(raise_exception=True)
            filters = lookup_scope(caller=who, requested=data.validated_data.get("dataset_ids"))
        except Exception as exc:
            invocation_record(api_key=who.api_key, payload=request.data, error=exc,
                              latency_ms=(time.perf_counter() - started) * 1000)
            raise
        values = data.validated_data
        result = lookup_knowledge(filters=filters, query=values["query"],
                                  tool_call_id=values.get("tool_call_id", ""),
                                  session_id=values.get("session_id", ""))
        canonical_store(tenant_id=filters.tenant_id, result=result)
        invocation_record(api_key=who.api_key, result=result,
                          latency_ms=(time.perf_counter() - started) * 1000)
        body = RagResultProjector().project(result)
        unavailable = result.evidence_status == EvidenceStatus.UNAVAILABLE
        return Response(body, status=status.HTTP_503_SERVICE_UNAVAILABLE if unavailable
                        else status.HTTP_200_OK)


class EvidenceGuardApi(APIView):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        tool_call_id = serializers.RegexField(IDENT, required=False)
        session_id = serializers.RegexField(IDENT, required=False)
        document_ids = serializers.ListField(child=serializers.CharField(max_length=200),
                                             min_length=1, max_length=200)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if bool(attrs.get("tool_call_id")) == bool(attrs.get("session_id")):
                raise serializers.ValidationError("give exactly one of tool_call_id, session_id")
            return attrs

    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        verdicts = ready_evidence(tenant_id=caller(request).tenant.pk, **data.validated_data)
        return Response({"ready": [d for d, ok in verdicts.items() if ok],
                         "not_ready": [d for d, ok in verdicts.items() if not ok]})
