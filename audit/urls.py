from django.urls import path

from audit import apis

urlpatterns = [
    path("diagnosis/<str:session_id>/trace", apis.SessionTraceApi.as_view()),
    path("audit/cited-rates", apis.CitedRatesApi.as_view()),
]
