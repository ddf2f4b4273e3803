from django.urls import path

from retrieval.tools import views as apis
from retrieval.tools.registry import TOOLS

urlpatterns = [
    *(path(tool.path.removeprefix("/api/"), apis.tool_api(tool).as_view()) for tool in TOOLS
      if tool.operation),
    path("tools/schema", apis.ToolSchemaApi.as_view()),
    path("knowledge/rebuild-hybrid", apis.RebuildApi.as_view()),
    path("knowledge/rollback", apis.RollbackApi.as_view()),
    path("knowledge/reconcile", apis.ReconcileApi.as_view()),
    path("knowledge/index-versions", apis.IndexVersionListApi.as_view()),
    path("health", apis.HealthApi.as_view(), name="health"),
]
