"""The landing page at `/`: what this is and where to go (the admin's "View site" link)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe


@require_safe
def landing(request: HttpRequest) -> HttpResponse:
    return render(request, "kbplatform/landing.html")
