"""What the web process keeps out: the extras Django REST framework imports only to find out whether they are there.

DRF's `compat` module imports `requests` (for its test client, `RequestsClient`) and
`django.contrib.postgres` (for the serializer fields of PostgreSQL's model fields, which
brings in psycopg) whenever they are installed. Nothing here uses either through DRF:
no model has a PostgreSQL-only field, and the tests' clients are Django's and httpx.
Both are installed all the same (the OTLP exporter uses `requests`; a PostgreSQL server
needs psycopg), so the web process paid for them: about 15 MB of its memory on SQLite,
and a tenth of a second of its start. Seen as missing while `compat` is imported, they
are left out; once it is, they can be imported as usual by whatever needs them.
"""
from __future__ import annotations

import sys

UNUSED_BY_DRF = ("requests", "django.contrib.postgres")


def import_rest_framework_lean() -> None:
    """Import DRF's `compat` with UNUSED_BY_DRF hidden from it (those not imported already)."""
    if "rest_framework.compat" in sys.modules:
        return
    hidden = [name for name in UNUSED_BY_DRF if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # `import name` raises ImportError, which compat expects of a missing extra
    try:
        import rest_framework.compat  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]
