from django.urls import path

from datasets.api import views
from datasets.sources import apis as source_apis

urlpatterns = [
    path("datasets", views.DatasetListApi.as_view()),
    path("datasets/<str:dataset_id>/documents", views.DocumentListApi.as_view()),
    path("documents/<str:doc_id>", views.DocumentDetailApi.as_view()),
    path("documents/<str:doc_id>/reindex", views.DocumentReindexApi.as_view()),
    path("jobs/<str:job_id>", views.JobDetailApi.as_view()),
    path("sources", source_apis.SourceListApi.as_view()),
    path("sources/<str:source_id>", source_apis.SourceDetailApi.as_view()),
    path("sources/<str:source_id>/sync", source_apis.SourceSyncApi.as_view()),
]
