"""A session's artifacts: the files its turns produced, listed and downloaded by its principal
(and by operators, whose reads are not recorded)."""
from __future__ import annotations

from django.http import HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from channels_app.errors import APIError
from channels_app.ownership import get_owned_session
from channels_app.pagination import ArtifactPages, paginate
from channels_app.replies.artifacts import Artifact, ArtifactList
from channels_app.schema import SESSION, list_parameters, refusals
from sessions.models import Artifact as ArtifactRow


class AnyAccept(DefaultContentNegotiation):
    """A download is whatever type the artifact has: the `Accept` header never refuses it (no 406).
    Refusals are written as JSON, as on every route."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class SessionArtifactsView(APIView):
    @extend_schema(operation_id="v1_session_artifacts_list", summary="The files the session's turns produced",
                   parameters=list_parameters("Artifacts", 100), responses={200: ArtifactList, **refusals(*SESSION)})
    def get(self, request: Request, slug: str, session_id: str) -> Response:
        session = get_owned_session(slug, session_id, request.user, operators=True)
        rows = ArtifactRow.objects.filter(session=session)
        return paginate(ArtifactPages, rows, request, self, lambda r: Artifact.of(r, slug))


class SessionArtifactView(APIView):
    content_negotiation_class = AnyAccept

    @extend_schema(
        operation_id="v1_session_artifact_download",
        summary="Download one artifact (as an attachment, with its content type)",
        responses={
            (200, "*/*"): OpenApiResponse(OpenApiTypes.BINARY, description="The artifact's bytes"),
            **refusals(*SESSION),
        },
    )
    def get(self, request: Request, slug: str, session_id: str, name: str) -> HttpResponse:
        session = get_owned_session(slug, session_id, request.user, operators=True)
        row = ArtifactRow.objects.filter(session=session, name=name).first()
        if row is None:
            raise APIError(404, "artifact_not_found", f"session {session_id!r} has no artifact {name!r}")
        response = HttpResponse(row.read(), content_type=row.content_type)
        response["Content-Disposition"] = content_disposition_header(True, row.name)
        # Served from the API's own origin: never sniffed, never run as a page.
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Security-Policy"] = "sandbox"
        response["Cache-Control"] = "private, no-cache"
        return response
