"""The caller's personal tokens: list, create (the secret shown once), revoke.

Tokens belong to Django users, so only a principal that is one (a login, or
a personal token with no agent scope) manages them; the loopback, anonymous
and `serve --bearer-token` principals have no user to own a token.
"""
from __future__ import annotations

from django.contrib.auth import get_user_model
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from channels_app.bodies import CreateToken, validate_body
from channels_app.doors import OWN_ACCOUNT
from channels_app.errors import APIError
from channels_app.pagination import TokenPages, paginate
from channels_app.replies.tokens import Token, TokenCreated, TokenList
from channels_app.schema import BODY, list_parameters, refusals
from sessions.models import PersonalToken, TokenError
from sessions.principal import Principal


def token_owner(principal: Principal):
    """The Django user `principal` is (else a 403 saying why it cannot manage tokens)."""
    if principal.authenticator != "django":
        raise APIError(403, "user_required", "personal tokens belong to user accounts: log in, or send a "
                                             "personal token, to manage them")
    User = get_user_model()
    user = User.objects.filter(**{User.USERNAME_FIELD: principal.principal_id}, is_active=True).first()
    if user is None:
        raise APIError(403, "user_required", "no active user account matches this caller")
    return user


class TokenListView(APIView):
    door = OWN_ACCOUNT  # a token scoped to some agents manages none

    @extend_schema(summary="The caller's personal tokens (never their secrets)",
                   parameters=list_parameters("Tokens", 100), responses={200: TokenList, **refusals(400, 401, 403)})
    def get(self, request: Request) -> Response:
        user = token_owner(request.user)
        return paginate(TokenPages, PersonalToken.objects.of_user(user), request, self, Token.of)

    @extend_schema(summary="Create a personal token; its secret is in this response only", request=CreateToken,
                   responses={201: TokenCreated, **refusals(400, 401, 403, *BODY)})
    def post(self, request: Request) -> Response:
        body: CreateToken = validate_body(CreateToken, request.data)
        user = token_owner(request.user)
        try:
            token, secret = PersonalToken.issue(user, body.name, expires_days=body.expires_days, agents=body.agents)
        except TokenError as exc:
            raise APIError(400, "invalid_request", str(exc)) from None
        return Response(TokenCreated(**Token.of(token).model_dump(), token=secret), status=201)


class TokenView(APIView):
    door = OWN_ACCOUNT

    @extend_schema(summary="Revoke one of the caller's personal tokens",
                   responses={204: OpenApiResponse(description="Revoked (or already revoked)"),
                              **refusals(400, 401, 403, 404)})
    def delete(self, request: Request, token_id: str) -> Response:
        user = token_owner(request.user)
        token = PersonalToken.objects.of_user(user).filter(pk=token_id).first()
        if token is None:  # another user's token is as unknown as one that never was
            raise APIError(404, "token_not_found", f"you have no token {token_id!r}")
        token.revoke()
        return Response(status=204)
