"""The admin's stylesheet and the API docs' assets are served by the web process itself
(WhiteNoise): the demo's admin answered base.css with a 404 and rendered as bare HTML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from tests.conftest import BOTH_RUNTIMES

ASSETS = ["/static/admin/css/base.css", "/static/admin/js/theme.js",
          "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css"]


@BOTH_RUNTIMES
@pytest.mark.parametrize("path", ASSETS)
def test_static_files_are_served_without_collectstatic(runtime: str, path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 200
    assert b"".join(response.streaming_content)  # type: ignore[attr-defined]


@BOTH_RUNTIMES
def test_collected_static_files_are_served_compressed(runtime: str, settings: Any,
                                                      tmp_path: Path) -> None:
    """The deployment path: `collectstatic` writes compressed copies that WhiteNoise serves."""
    settings.STATIC_ROOT = tmp_path / "static"
    call_command("collectstatic", "--no-input", verbosity=0)
    settings.WHITENOISE_USE_FINDERS = False  # as settings.py decides in a collected set-up
    assert (tmp_path / "static/admin/css/base.css.gz").is_file()
    response = Client().get(ASSETS[0], HTTP_ACCEPT_ENCODING="gzip")  # a new WhiteNoise scan
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip"
    assert response["Content-Type"].startswith("text/css")


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_the_admin_login_page_links_a_stylesheet_that_is_served(runtime: str) -> None:
    client = Client()
    page = client.get("/admin/login/").content.decode()
    assert 'href="/static/admin/css/base.css"' in page
    assert client.get("/static/admin/css/base.css").status_code == 200


@BOTH_RUNTIMES
def test_the_favicon_is_served_at_the_root(runtime: str) -> None:
    """Browsers ask every site for /favicon.ico: it was a 404 in the demo's log."""
    response = Client().get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert b"".join(response.streaming_content).startswith(  # type: ignore[attr-defined]
        b"\x00\x00\x01\x00")  # an icon file's header
