"""Model prices in the admin: a permitted operator adds one, it is validated and signed; others cannot."""
from __future__ import annotations

from decimal import Decimal

import pytest

from agents.pricing.model import ModelPrice
from tests.agents.test_secret_admin import login

ADD = "/admin/agents/modelprice/add/"
FORM = {"model": "openai:house-llm", "input_per_mtok": "0.5", "output_per_mtok": "1.5", "cache_read_per_mtok": "",
        "cache_write_per_mtok": "", "effective_from_0": "2026-01-01", "effective_from_1": "00:00:00", "note": "GPU box"}


@pytest.mark.django_db
def test_an_operator_with_the_permission_adds_a_price_signed_with_their_name():
    client = login("pat", operators=True, permissions=("add_modelprice", "view_modelprice", "change_modelprice"))
    response = client.post(ADD, FORM)
    assert response.status_code == 302, response.content.decode()[-2000:]
    row = ModelPrice.objects.get()
    assert (row.model, row.input_per_mtok, row.cache_read_per_mtok, row.updated_by) == (
        "openai:house-llm", Decimal("0.5"), None, "pat")
    assert b"openai:house-llm" in client.get("/admin/agents/modelprice/").content


@pytest.mark.django_db
def test_a_model_id_without_its_provider_is_refused_with_the_fix():
    client = login("pat", operators=True, permissions=("add_modelprice", "view_modelprice"))
    response = client.post(ADD, {**FORM, "model": "house-llm"})
    assert response.status_code == 200 and not ModelPrice.objects.exists()
    assert b"provider:model" in response.content


@pytest.mark.django_db
def test_without_the_permission_the_page_is_refused():
    client = login("sam", operators=True)
    assert client.get(ADD).status_code == 403
    assert client.post(ADD, FORM).status_code == 403 and not ModelPrice.objects.exists()
