from django.urls import path

from datasets import apis

urlpatterns = [
    path("datasets", apis.DatasetListApi.as_view()),
    path("datasets/<int:dataset_id>/documents", apis.DocumentListApi.as_view()),
    path("documents/<str:doc_id>", apis.DocumentDetailApi.as_view()),
    path("jobs/<int:job_id>", apis.JobDetailApi.as_view()),
    path("knowledge/rebuild-hybrid", apis.RebuildApi.as_view()),
]
