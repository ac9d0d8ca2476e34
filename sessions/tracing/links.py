"""Where an operator looks a trace up: `AGENTSITE_TRACE_URL` with the trace id in it.

`http://localhost:16686/trace/{traceId}` for a local Jaeger, for example. The
playground's trace page and the admin dashboard link trace ids through it;
blank, or not an http(s) URL with the placeholder: ids are shown, not linked.
"""
from __future__ import annotations

from django.conf import settings

TRACE_ID = "{traceId}"


def trace_url(trace_id: str) -> str:
    """The trace viewer's page for `trace_id`, or '' when there is none to link to."""
    template = settings.AGENTSITE_TRACE_URL
    if not trace_id or TRACE_ID not in template or not template.startswith(("http://", "https://")):
        return ""
    return template.replace(TRACE_ID, trace_id)
