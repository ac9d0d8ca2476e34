"""The OpenAPI document: refusals, parameters, security and the routes that are not DRF views.

Every operation lists each status it can answer, errors with the one error
body. The statuses every route shares:

- 400: bad input, including text neither database stores (NUL) in a path
  id or a query parameter, refused before any view runs;
- 401: no auth policy admitted the caller (every route but liveness);
- 403: another principal's session, or a state-changing request from a
  page on another site (`foreign_origin`);
- 404: an unknown agent, session, reminder, approval, tool, schedule or artifact;
- 413 and 415: a body over the size limit, or not JSON;
- 429: over a per-principal rate limit (starting sessions, sending messages, handoffs).

What the code alone says (routes, serializers, models) is made once per process
(`Generator`); what depends on the caller and on the agents deployed is added
per request, so `security` says what this server's auth chain really asks for
(see `security_requirement`) and each deployed tool has its operation.

Custom channel routes (`/<slug>/v1/channels/<id>/...`) are left out on
purpose: each agent release declares its own, with its own auth chain, so
one document cannot describe them. `GET /<slug>/v1/info` lists them with
their JSON schemas (see channels_app.custom_channels).
"""
from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.utils import translation
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.plumbing import normalize_result_object, sanitize_result_object
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from channels_app.auth import agent_scope
from channels_app.bodies import NO_NUL, keep_to_scope
from channels_app.patterns import END
from channels_app.handoff_operations import add_handoff_operations
from channels_app.tool_operations import add_tool_operations
from channels_app.replies.base import ErrorBody
from channels_app.replies.sessions import EventEnvelope

SLUG = "^[-a-zA-Z0-9_]+$"  # Django's slug path converter
# A count as parse_count reads it: ASCII digits, at most 18 of them.
MAX_COUNT = 10**18 - 1

WHY = {
    400: "Bad input: the error names the field and what is wrong with it",
    401: "No auth policy admitted the request",
    403: "Another principal's session, a cross-site request, or a route this server does not offer",
    404: "Unknown agent, session or other resource named in the path",
    409: "The request conflicts with the session's state (see the error code)",
    413: "The body is over the upload limit",
    415: "The body is not application/json",
    422: "The tool cannot run here (code `execution_unavailable`); one that ran and raised is a 200 with `isError`",
    424: "The model asked for is not configured on this server (code `no_credential`; details list the alternatives)",
    502: "A model provider failed the request (code `handoff_failed`: the session stayed where it was)",
    429: "Over the caller's rate limit (AGENTSITE_RATE_SESSIONS or AGENTSITE_RATE_MESSAGES, code `rate_limited`): "
         "retry after the seconds the Retry-After header gives",
}
SESSION = (400, 401, 403, 404)  # a route naming a session (or another owned resource)
BODY = (413, 415)  # a route that reads a JSON body


RETRY_AFTER = OpenApiParameter("Retry-After", int, OpenApiParameter.HEADER, response=[429],
                               description="Seconds until the caller's budget starts again")


def refusals(*statuses: int) -> dict[int, OpenApiResponse]:
    return {status: OpenApiResponse(ErrorBody, description=WHY[status]) for status in statuses}


START_INDEX = {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}
LAST_EVENT_ID = {"type": "string", "pattern": rf"^(?:[0-9]{{1,18}})?{END}"}  # parse_count's count, or empty
EVENTS_PARAMETERS = [
    OpenApiParameter("startIndex", START_INDEX, description="The first event index to send (default 0)"),
]


def list_parameters(items: str, default: int) -> list[OpenApiParameter]:
    """`cursor` and `limit` of a paged list (channels_app.pagination)."""
    return [
        OpenApiParameter("cursor", {"type": "string", "pattern": NO_NUL},
                         description="`nextCursor` of the previous page, as this server issued it; empty: the first"),
        OpenApiParameter("limit", {"type": "integer", "minimum": 1, "maximum": 100},
                         description=f"{items} per page (default {default})"),
    ]
ALL_SESSIONS = OpenApiParameter(
    "all", {"type": "string", "enum": ["1", "0", "true", "false"]},
    description="1: every principal's sessions of the agent, for operators (staff and the operators group); "
                "a 403 for anyone else",
)
NDJSON_EVENTS = {
    (200, "application/x-ndjson"): OpenApiResponse(
        {"type": "string"},
        description="One event envelope per line: {type, index, sessionId, turnId, at, data} (see EventEnvelope)",
    ),
}


class PolicyChainScheme(OpenApiAuthenticationExtension):
    """The auth chain; which of its schemes an operation requires is settled in `document_security`."""

    target_class = "channels_app.auth.PolicyChainAuthentication"
    name = ["bearerAuth", "cookieAuth"]

    def get_security_definition(self, auto_schema) -> list[dict[str, Any]]:
        return [
            {"type": "http", "scheme": "bearer", "description": "A token given to `serve --bearer-token`."},
            {"type": "apiKey", "in": "cookie", "name": settings.SESSION_COOKIE_NAME,
             "description": "A Django admin login (state-changing requests also need the CSRF token)."},
        ]


def security_requirement() -> list[dict[str, list]]:
    """What the configured chain asks of a caller, as an OpenAPI `security` list.

    The loopback policies (the default) and `allow_all` take no credentials:
    a loopback caller, or anyone, is admitted as it is (others get 401).
    `serve --bearer-token` wants the token or an admin login. A custom chain
    may admit anyone, so its credentials are optional.
    """
    if getattr(settings, "AGENTSITE_AUTH_POLICIES", None):
        return [{"bearerAuth": []}, {}]
    if settings.AGENTSITE_AUTH == "bearer":
        return [{"bearerAuth": []}, {"cookieAuth": []}]
    return []


# One event of the SSE stream (each, OpenAPI 3.2's `itemSchema`): its index, its type, its envelope as JSON.
SSE_EVENT = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json",
                 "contentSchema": {"$ref": "#/components/schemas/EventEnvelope"}},
    },
    "required": ["id", "event", "data"],
}


def add_streaming_routes(result, generator, request, public):
    path_parameter = {"in": "path", "required": True, "schema": {"type": "string", "pattern": NO_NUL}}
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    result.setdefault("paths", {})["/{slug}/v1/session/{session_id}/stream"] = {
        "get": {
            "operationId": "session_stream",
            "summary": "Replay events from startIndex, then follow live (NDJSON, or SSE with Accept: text/event-stream)",
            "tags": ["session"],
            "parameters": [
                {**path_parameter, "name": "slug", "schema": {"type": "string", "pattern": SLUG}},
                {**path_parameter, "name": "session_id"},
                {"name": "startIndex", "in": "query", "schema": START_INDEX},
                {"name": "Last-Event-ID", "in": "header", "schema": LAST_EVENT_ID,
                 "description": "SSE only, without startIndex: resume after this index (empty: from the start); any other value is a 400"},
            ],
            "security": [{"bearerAuth": []}],  # replaced by document_security
            "responses": {
                "200": {
                    "description": "One event envelope per line: {type, index, sessionId, turnId, at, data}",
                    "content": {"application/x-ndjson": {"schema": {"type": "string"}},
                                "text/event-stream": {"itemSchema": SSE_EVENT}},
                },
                **{str(s): {"description": WHY[s], "content": error} for s in SESSION},
            },
        }
    }
    return add_turn_streams(result)


# The routes that start a turn answer with its events when asked (channels_app.stream.turn_stream).
TURN_STREAM = {
    "description": "With `Accept: application/x-ndjson` or `text/event-stream`: the new turn's events, in the "
                   "stream route's formats, from its first (index 0 for a new session; for a follow-up, the "
                   "index the log had when the message was admitted) to the turn's end (its session.waiting, "
                   "session.completed or session.failed, or its park for approval); then the stream closes. "
                   "The turn runs on whether or not the client reads to the end. Refusals before the stream "
                   "are the JSON errors listed here",
    "headers": {
        "X-Session-Id": {"description": "The session", "schema": {"type": "string"}},
        "X-Continuation-Token": {"description": "The token the next follow-up must send",
                                 "schema": {"type": "string"}},
    },
    "content": {"application/x-ndjson": {"schema": {"type": "string"}}, "text/event-stream": {"itemSchema": SSE_EVENT}},
}
STARTS_TURNS = ("v1_session_create", "v1_session_message_create")


def add_turn_streams(result: dict[str, Any]) -> dict[str, Any]:
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if operation.get("operationId") in STARTS_TURNS:
                operation["responses"]["200"] = TURN_STREAM
    return result


def document_security(result, generator, request, public):
    """Each operation's real requirement; liveness routes (no authenticators) need nothing.

    Also: path ids as the middleware takes them (no NUL), tool input as
    `load_json` takes it (any JSON without NUL, which pydantic cannot say),
    and the event envelope schema that the NDJSON routes describe in prose;
    then each deployed tool's own operation and each agent's own handoff (`channels_app.tool_operations`,
    `channels_app.handoff_operations`: a token scoped to some agents gets theirs only, and enums naming
    agents or their models cut to them) and the links (`add_links`).
    """
    requirement = security_requirement()
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            operation["security"] = requirement if "security" in operation else []
            for parameter in operation.get("parameters", []):
                schema = parameter.get("schema", {})
                if parameter["in"] == "path" and schema.get("type") == "string" and "pattern" not in schema:
                    schema["pattern"] = SLUG if parameter["name"] == "slug" else NO_NUL
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("JSONValue", JSON_VALUE)
    if "ToolCallBody" in schemas:
        schemas["ToolCallBody"]["properties"]["input"].update(
            propertyNames={"pattern": NO_NUL}, additionalProperties={"$ref": "#/components/schemas/JSONValue"})
    schemas.setdefault("EventEnvelope", EventEnvelope.model_json_schema(mode="serialization"))
    if not requirement:
        result["components"].pop("securitySchemes", None)
    scope = agent_scope(getattr(request, "user", None))
    keep_to_scope(schemas, scope)
    return add_links(add_handoff_operations(add_tool_operations(result, scope), scope))


class Generator(SchemaGenerator):
    """drf-spectacular's document of the code (its settings' hooks applied), made once per process and
    language (about 0.1 s of CPU each time), then `document_security` on a copy for each request.

    What is kept may depend only on the code and the settings (a changed setting forgets it): everything
    that depends on the caller or the deployed agents is added per request. A generator given its own
    URL patterns (`spectacular --urlconf`) makes its document afresh."""

    made: dict[tuple, dict[str, Any]] = {}
    lock = threading.Lock()

    def get_schema(self, request=None, public=False):
        # normalize_result_object builds new dicts and lists: the copy this request changes.
        result = document_security(normalize_result_object(self.of_the_code(request, public)), self, request, public)
        return sanitize_result_object(normalize_result_object(result))

    def of_the_code(self, request, public: bool) -> dict[str, Any]:
        if self.patterns is not None or self.urlconf is not None:
            return super().get_schema(request=request, public=public)
        key = (public, self.api_version or getattr(request, "version", None), translation.get_language())
        with self.lock:
            if key not in self.made:
                self.made[key] = super().get_schema(request=request, public=public)
            return self.made[key]


def forget_documents(**kwargs) -> None:
    """A changed setting (tests override them) may change the document of the code."""
    with Generator.lock:
        Generator.made.clear()


setting_changed.connect(forget_documents)


# Any JSON without NUL in its text: what `load_json` takes (tool input).
JSON_VALUE = {
    "description": "Any JSON value; no text in it may hold NUL",
    "anyOf": [
        {"type": ["null", "boolean", "number"]},
        {"type": "string", "pattern": NO_NUL},
        {"type": "array", "items": {"$ref": "#/components/schemas/JSONValue"}},
        {"type": "object", "propertyNames": {"pattern": NO_NUL},
         "additionalProperties": {"$ref": "#/components/schemas/JSONValue"}},
    ],
}


# Where the ids an operation takes come from: OpenAPI links, so that a client (or a tester
# following them) reaches each route with ids this server made. {operationId: {status: {name: link}}}
SESSION_IDS = {"slug": "$request.path.slug", "session_id": "$response.body#/sessionId"}
# A link's body is the whole body (Schemathesis would otherwise merge generated fields into it,
# and what one tool or a follow-up takes is narrower than the templated route's schema).
AS_IS = {"x-schemathesis": {"merge_body": False}}
OF_SESSION = {
    "SessionDetail": "v1_session_retrieve", "SessionEvents": "v1_session_events_retrieve",
    "SessionStream": "session_stream", "FollowUp": "v1_session_message_create", "Stop": "v1_session_stop_create",
    "Approvals": "v1_session_approvals_retrieve", "Artifacts": "v1_session_artifacts_list",
    "Reminders": "v1_session_reminders_retrieve", "SetReminder": "v1_session_reminders_create",
    "DeleteSession": "v1_session_destroy",
}
SESSION_LINKS = {
    **{name: {"operationId": target, "parameters": SESSION_IDS} for name, target in OF_SESSION.items()},
    "FollowUpByToken": {"operationId": "v1_session_create", "parameters": {"slug": "$request.path.slug"},
                        "requestBody": {"message": "And then?",
                                        "continuationToken": "$response.body#/continuationToken"}, **AS_IS},
    "WorkspaceToolCall": {
        "operationId": "v1_tools_call_create",
        "description": "`ls`, where the agent offers workspace tools (GET /info), bound to the session",
        "parameters": {"slug": "$request.path.slug", "tool_name": "ls"},
        "requestBody": {"sessionId": "$response.body#/sessionId", "input": {}}, **AS_IS},
}
# The streamed answer of the routes that start a turn (TURN_STREAM) names the session in its headers.
STREAMED_IDS = {"slug": "$request.path.slug", "session_id": "$response.header.X-Session-Id"}
STREAMED_LINKS = {
    **{name: {"operationId": target, "parameters": STREAMED_IDS} for name, target in OF_SESSION.items()},
    "FollowUpByToken": {"operationId": "v1_session_create", "parameters": {"slug": "$request.path.slug"},
                        "requestBody": {"message": "And then?",
                                        "continuationToken": "$response.header.X-Continuation-Token"}, **AS_IS},
}
SLUG_FROM_LIST = {"slug": "$response.body#/agents/0/slug"}
LINKS: dict[str, dict[str, dict[str, Any]]] = {
    "v1_agents_retrieve": {"200": {
        name: {"operationId": target, "parameters": SLUG_FROM_LIST} for name, target in (
            ("AgentInfo", "v1_info_retrieve"), ("CreateSession", "v1_session_create"),
            ("Sessions", "v1_sessions_retrieve"))}},
    "v1_info_retrieve": {"200": {"FireSchedule": {
        "operationId": "v1_dev_schedules_create",
        "description": "Under `serve --dev`: fire the agent's first schedule now",
        "parameters": {"slug": "$request.path.slug", "schedule_id": "$response.body#/schedules/0/id"}}}},
    "v1_session_create": {"201": SESSION_LINKS, "202": SESSION_LINKS, "200": STREAMED_LINKS},
    "v1_session_message_create": {"202": {name: SESSION_LINKS[name] for name in ("Stop", "SessionEvents")},
                                  "200": {name: STREAMED_LINKS[name] for name in ("Stop", "SessionEvents")}},
    "v1_tools_call_create": {"202": {"Decide": {
        "operationId": "v1_session_approvals_create",
        "parameters": {**SESSION_IDS, "call_id": "$response.body#/callId"}}}},
    "v1_session_approvals_retrieve": {"200": {"Decide": {
        "operationId": "v1_session_approvals_create",
        "parameters": {"slug": "$request.path.slug", "session_id": "$request.path.session_id",
                       "call_id": "$response.body#/approvals/0/callId"}}}},
    "v1_session_artifacts_list": {"200": {"Download": {
        "operationId": "v1_session_artifact_download",
        "parameters": {"slug": "$request.path.slug", "session_id": "$request.path.session_id",
                       "name": "$response.body#/artifacts/0/name"}}}},
    "v1_session_reminders_create": {"201": {
        name: {"operationId": target,
               "parameters": {"slug": "$request.path.slug", "reminder_id": "$response.body#/reminderId"}}
        for name, target in (("Cancel", "v1_reminders_destroy"), ("Fire", "v1_dev_reminders_create"))}},
}


def add_links(result: dict[str, Any]) -> dict[str, Any]:
    """The links above, on the responses they start from."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            for status, links in LINKS.get(operation.get("operationId"), {}).items():
                # Merged over links already there (each deployed tool's own call, from tool_operations).
                operation["responses"][status]["links"] = {**links, **operation["responses"][status].get("links", {})}
    return result
