"""A key-value delete is one conditional DELETE: it wins only at the version read, with no read in between."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions.models import KVEntry


@pytest.mark.django_db
def test_remove_deletes_only_the_version_read_in_one_statement(support_agent):
    entry = KVEntry.objects.create(agent=support_agent, key="k", value={"n": 1}, version=3)
    with CaptureQueriesContext(connection) as stale:
        assert KVEntry.remove(entry.pk, 2) is False
    assert KVEntry.objects.filter(pk=entry.pk).exists()
    with CaptureQueriesContext(connection) as current:
        assert KVEntry.remove(entry.pk, 3) is True
    assert not KVEntry.objects.filter(pk=entry.pk).exists()
    for queries in (stale, current):
        [statement] = [q["sql"] for q in queries.captured_queries]
        assert statement.startswith("DELETE") and "version" in statement, statement
