from django.urls import path

from retrieval import apis

urlpatterns = [
    path("tools/lookup_knowledge", apis.LookupKnowledgeApi.as_view()),
    path("tools/evidence_guard", apis.EvidenceGuardApi.as_view()),
]
