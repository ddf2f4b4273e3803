"""A help text in the admin is text: every add form shows each field's help text as written,
"<name>" included (the stock template rendered it as a tag: "each one's path is /.")."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client, RequestFactory
from django.utils.html import escape
from django.utils.safestring import SafeData

from tests.conftest import BOTH_RUNTIMES


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_every_add_form_shows_its_help_texts_as_written(runtime: str, admin_client: Client,
                                                        admin_user: object) -> None:
    request = RequestFactory().get("/")
    request.user = admin_user
    shown = 0
    for model, model_admin in admin.site._registry.items():
        if (not model_admin.has_add_permission(request)
                or type(model_admin).add_view is not admin.ModelAdmin.add_view):
            continue  # a page of its own (a new evaluation run) or none
        opts = model._meta
        page = admin_client.get(f"/admin/{opts.app_label}/{opts.model_name}/add/")
        assert page.status_code == 200, opts.label
        html = page.content.decode()
        for name, field in model_admin.get_form(request).base_fields.items():
            text = str(field.help_text)  # lazy ones too
            if text and not isinstance(text, SafeData):  # Django's password rules are HTML
                assert escape(text) in html, f"{opts.label}.{name}"
                shown += 1
    assert shown > 20
    source_page = admin_client.get("/admin/datasets/source/add/").content.decode()
    assert "each one&#x27;s path is &lt;name&gt;/&lt;path in the source&gt;." in source_page
    # Help texts marked safe stay HTML: Django's list of the password rules.
    assert "<ul><li>" in admin_client.get("/admin/auth/user/add/").content.decode()
