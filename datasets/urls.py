from django.urls import path

from datasets import apis

urlpatterns = [
    path("datasets", apis.DatasetListApi.as_view()),
    path("datasets/<str:dataset_id>/documents", apis.DocumentListApi.as_view()),
    path("documents/<str:doc_id>", apis.DocumentDetailApi.as_view()),
    path("documents/<str:doc_id>/reindex", apis.DocumentReindexApi.as_view()),
    path("jobs/<str:job_id>", apis.JobDetailApi.as_view()),
]
