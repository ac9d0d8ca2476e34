"""OpenAPI additions for routes that are not DRF views."""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class PolicyChainScheme(OpenApiAuthenticationExtension):
    """Documents the chain as bearer auth (loopback callers need no header by default)."""

    target_class = "channels_app.auth.PolicyChainAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "Required under `serve --bearer-token`; the default chain admits loopback callers only.",
        }


def add_streaming_routes(result, generator, request, public):
    result.setdefault("paths", {})["/{slug}/v1/session/{session_id}/stream"] = {
        "get": {
            "operationId": "session_stream",
            "summary": "Replay events from startIndex, then follow live (NDJSON, or SSE with Accept: text/event-stream)",
            "tags": ["session"],
            "parameters": [
                {"name": "slug", "in": "path", "required": True, "schema": {"type": "string"}},
                {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}},
                {"name": "startIndex", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}},
            ],
            "responses": {
                "200": {
                    "description": "One event envelope per line: {type, index, sessionId, turnId, at, data}",
                    "content": {"application/x-ndjson": {"schema": {"type": "string"}},
                                "text/event-stream": {"schema": {"type": "string"}}},
                },
                "401": {"description": "No auth policy admitted the request"},
                "403": {"description": "The session belongs to another principal"},
                "404": {"description": "Unknown agent or session"},
            },
        }
    }
    return result
