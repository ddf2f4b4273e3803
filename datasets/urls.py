from django.urls import path

from datasets import apis
from datasets.sources import apis as source_apis

urlpatterns = [
    path("datasets", apis.DatasetListApi.as_view()),
    path("datasets/<str:dataset_id>/documents", apis.DocumentListApi.as_view()),
    path("documents/<str:doc_id>", apis.DocumentDetailApi.as_view()),
    path("documents/<str:doc_id>/reindex", apis.DocumentReindexApi.as_view()),
    path("jobs/<str:job_id>", apis.JobDetailApi.as_view()),
    path("sources", source_apis.SourceListApi.as_view()),
    path("sources/<str:source_id>", source_apis.SourceDetailApi.as_view()),
    path("sources/<str:source_id>/sync", source_apis.SourceSyncApi.as_view()),
]
