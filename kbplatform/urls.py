from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("datasets.urls")),
    path("api/", include("retrieval.urls")),
    path("api/", include("audit.urls")),
]
