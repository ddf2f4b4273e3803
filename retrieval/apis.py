"""The tool endpoint and the evidence guard."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.canonical import canonical_store, ready_evidence
from audit.services import invocation_record
from datasets.apis import caller
from datasets.auth import Caller
from datasets.models import ApiKey
from retrieval.lookup_service import lookup_knowledge, lookup_scope
from retrieval.project import RagResultProjector
from retrieval.types import EvidenceStatus

IDENT = r"^[A-Za-z0-9_.:\-]{1,128}$"


class LookupKnowledgeApi(APIView):
    """The tool. Exactly one audit row per call: `post` writes it for an answer (READY, EMPTY,
    UNAVAILABLE), `handle_exception` for every failure, a 401 from `initial` included."""

    started = 0.0

    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        query = serializers.CharField(trim_whitespace=True, max_length=settings.KB_MAX_QUERY_CHARS)
        tool_call_id = serializers.RegexField(IDENT, required=False)
        session_id = serializers.RegexField(IDENT, required=False)
        dataset_ids = serializers.ListField(child=serializers.IntegerField(min_value=1),
                                            required=False, max_length=100)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.started = time.perf_counter()  # before authentication: a 401 has a latency too
        super().initial(request, *args, **kwargs)

    def post(self, request: Request) -> Response:
        who = caller(request)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        filters = lookup_scope(caller=who, requested=values.get("dataset_ids"))
        result = lookup_knowledge(filters=filters, query=values["query"],
                                  tool_call_id=values.get("tool_call_id", ""),
                                  session_id=values.get("session_id", ""))
        canonical_store(tenant_id=filters.tenant_id, result=result)
        body = RagResultProjector().project(result)
        # Last, so that anything raising above is audited once, by handle_exception.
        invocation_record(api_key=who.api_key, result=result, latency_ms=self._elapsed_ms())
        unavailable = result.evidence_status == EvidenceStatus.UNAVAILABLE
        return Response(body, status=status.HTTP_503_SERVICE_UNAVAILABLE if unavailable
                        else status.HTTP_200_OK)

    def handle_exception(self, exc: Exception) -> Response:
        key = self._audit_key()
        # A stranger's body is not parsed: no tenant could trace its ids anyway.
        invocation_record(api_key=key, payload=self._audit_payload() if key else None,
                          error=exc, latency_ms=self._elapsed_ms())
        return super().handle_exception(exc)

    def _elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def _audit_key(self) -> ApiKey | None:
        try:
            user = self.request.user  # authenticates now if a 406 came first; may fail again
        except exceptions.APIException:
            return None
        return user.api_key if isinstance(user, Caller) else None

    def _audit_payload(self) -> Mapping[str, Any] | None:
        try:
            data = self.request.data
        except exceptions.APIException:  # an unparsable body; the error is the one audited
            return None
        return data if isinstance(data, Mapping) else None


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
