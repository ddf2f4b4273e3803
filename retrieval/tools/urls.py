from django.urls import path

from retrieval.tools import views as apis

urlpatterns = [
    path("tools/lookup_knowledge", apis.LookupKnowledgeApi.as_view()),
    path("tools/evidence_guard", apis.EvidenceGuardApi.as_view()),
    path("tools/schema", apis.ToolSchemaApi.as_view()),
    path("rag/answer", apis.RagAnswerApi.as_view()),
    path("rag/agentic", apis.RagAgenticApi.as_view()),
    path("rag/node", apis.RagNodeApi.as_view()),
    path("knowledge/rebuild-hybrid", apis.RebuildApi.as_view()),
    path("knowledge/rollback", apis.RollbackApi.as_view()),
    path("knowledge/reconcile", apis.ReconcileApi.as_view()),
    path("knowledge/index-versions", apis.IndexVersionListApi.as_view()),
    path("health", apis.HealthApi.as_view(), name="health"),
]
