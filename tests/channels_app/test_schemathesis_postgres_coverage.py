"""Schemathesis's coverage phase against a server on PostgreSQL and Redis: see tests/channels_app/schemathesis_run.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.channels_app.schemathesis_run import check_phase

pytestmark = pytest.mark.slow  # minutes: see tests/conftest.py


@pytest.mark.timeout(900)  # a whole Schemathesis phase; on a busy machine it can take minutes
def test_the_coverage_phase_finds_the_server_as_its_openapi_document_says(tmp_path: Path):
    check_phase(tmp_path, "postgres+redis", "coverage")
