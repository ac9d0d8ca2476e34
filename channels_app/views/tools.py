"""Tools called without a model turn, the approvals that gate tool calls, and the model's questions."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from channels_app.bodies import ApprovalDecision, QuestionAnswer, ToolCallBody, validate_body
from channels_app.ownership import get_agent, get_owned_session
from channels_app.pagination import ApprovalPages, paginate
from channels_app.replies.tools import Approval, ApprovalList, ParkedToolCall, Question, ToolResult
from channels_app.schema import BODY, SESSION, list_parameters, refusals
from sessions.turn.approvals import answer_question, pending_approvals, resolve_approval
from sessions.direct.calls import Parked, run_call


class ApprovalListView(APIView):
    @extend_schema(summary="Tool calls parked for approval", parameters=list_parameters("Approvals", 100),
                   responses={200: ApprovalList, **refusals(*SESSION)})
    def get(self, request: Request, slug: str, session_id: str) -> Response:
        session = get_owned_session(slug, session_id, request.user, operators=True)
        return paginate(ApprovalPages, pending_approvals(session), request, self, Approval.of)


class ApprovalResolveView(APIView):
    @extend_schema(summary="Approve or deny a parked tool call", request=ApprovalDecision,
                   responses={200: Approval, **refusals(*SESSION, 409, *BODY)})
    def post(self, request: Request, slug: str, session_id: str, call_id: str) -> Response:
        body: ApprovalDecision = validate_body(ApprovalDecision, request.data)
        session = get_owned_session(slug, session_id, request.user, operators=True)
        row = resolve_approval(session, call_id, body.decision, request.user, body.reason)
        return Response(Approval.of(row))


class QuestionAnswerView(APIView):
    @extend_schema(summary="Answer a question the agent asked (ask_question): the answer is the call's result",
                   request=QuestionAnswer, responses={200: Question, **refusals(*SESSION, 409, *BODY)})
    def post(self, request: Request, slug: str, session_id: str, call_id: str) -> Response:
        body: QuestionAnswer = validate_body(QuestionAnswer, request.data)
        session = get_owned_session(slug, session_id, request.user, operators=True)
        return Response(Question.of(answer_question(session, call_id, body.answer, request.user)))


class ToolCallView(APIView):
    @extend_schema(
        summary="Call a server tool deterministically, without a model turn",
        request=ToolCallBody,
        responses={
            200: OpenApiResponse(ToolResult, description=(
                "The call ran (or was stubbed in a dryRun session). A tool that raised is a call that ran, "
                "as MCP answers one: `isError` true and its `error`, not a refusal")),
            202: OpenApiResponse(ParkedToolCall, description="Bound to a session, the call waits for approval"),
            **refusals(*SESSION, 409, 422, *BODY),
        },
    )
    def post(self, request: Request, slug: str, tool_name: str) -> Response:
        body: ToolCallBody = validate_body(ToolCallBody, request.data)
        agent = get_agent(slug)
        session = get_owned_session(slug, body.session_id, request.user) if body.session_id else None
        outcome = run_call(agent, tool_name, body.input, session=session)
        # A needs_approval tool bound to a session parks until someone decides it.
        if isinstance(outcome, Parked):
            return Response(ParkedToolCall.of(outcome), status=202)
        return Response(ToolResult.of(outcome))
