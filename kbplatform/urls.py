from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView

import kbplatform.openapi  # noqa: F401  (registers the API-key schemes with drf-spectacular)
from kbplatform.views import landing

urlpatterns = [
    path("", landing, name="landing"),  # also the admin's "View site"
    # The evaluation runs' pages moved with their app: links to where they were still open them.
    re_path(r"^admin/retrieval/evaluationrun/(?P<rest>.*)$", RedirectView.as_view(
        url="/admin/evaluation/evaluationrun/%(rest)s", query_string=True, permanent=True)),
    path("admin/", admin.site.urls),
    # The OpenAPI 3 schema and Swagger UI: readable without a key (SPECTACULAR_SETTINGS).
    path("api/schema", SpectacularJSONAPIView.as_view(), name="api-schema"),
    path("api/docs", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/", include("datasets.api.urls")),
    path("api/", include("retrieval.tools.urls")),
    path("api/", include("audit.urls")),
]

handler404 = "kbplatform.errors.not_found"
handler500 = "kbplatform.errors.server_error"
