"""The REST reads of RagConfig's A/B tests: an A/B test's cited rates, arm against arm."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.cited import experiment_cited
from datasets.documents.selectors import db_id
from datasets.tenancy.keys import IsAdminKey, caller
from kbplatform.errors import NotFound
from kbplatform.openapi import errors, path_id
from retrieval.ragconfig.models import ConfigExperiment


class ExperimentCitedApi(APIView):
    permission_classes = [IsAdminKey]

    @extend_schema(
        operation_id="experiment_cited_rates", summary="An A/B test's cited rates, per arm",
        description="Admin keys of the test's tenant (a dataset-scoped key: the evidence of "
                    "its datasets). Per arm: served, cited, helpful, not helpful, calls, cited "
                    "per call; the candidate against the control by a two-proportion z-test "
                    "(cited rate) and a z-test of means (cited per call), or \"not enough data "
                    "yet\" while either arm has fewer than `minimum` served items / calls.",
        parameters=[path_id("experiment_id", "The A/B test's id.")],
        responses={200: OpenApiTypes.OBJECT, **errors(401, 403, 404, 503)})
    def get(self, request: Request, experiment_id: str) -> Response:
        who = caller(request)
        pk = db_id(experiment_id)
        experiment = ConfigExperiment.objects.filter(
            pk=pk, config__tenant_id=who.tenant.pk).first() if pk else None
        if experiment is None:  # another tenant's test looks like none at all
            raise NotFound("no such A/B test")
        figures = experiment_cited(
            experiment_id=experiment.pk, control=ConfigExperiment.Arm.CONTROL,
            candidate=ConfigExperiment.Arm.CANDIDATE, tenant_id=who.tenant.pk,
            dataset_ids=who.writable_dataset_ids() if who.is_scoped else None)
        return Response({"id": experiment.pk, "running": experiment.running,
                         **figures.as_dict()})
