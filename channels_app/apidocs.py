"""`/api/schema/` and `/api/docs/`: the OpenAPI document and its viewer, behind the listing door.

The document names every deployed agent and its tools' input schemas, so it is for callers
the auth chain admits, as `GET /v1/agents` is: others get 401 (the viewer, a page, sends a
person to log in). A token scoped to some agents gets those agents' operations only
(`channels_app.schema.document_security`).
"""
from __future__ import annotations

from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from channels_app.auth import PolicyChainAuthentication
from channels_app.doors import LISTING, HasPrincipal, admitted_page


class SchemaView(SpectacularAPIView):
    authentication_classes = [PolicyChainAuthentication]
    permission_classes = [HasPrincipal]
    door = LISTING


docs_page = admitted_page(SpectacularSwaggerView.as_view(url_name="schema"), LISTING)
