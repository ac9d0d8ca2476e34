from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.management.database import migrate_if_needed
from sessions.models import PersonalToken, TokenError


class Command(BaseCommand):
    help = ("Create a personal API token for a user. The token is printed alone on the last line "
            "(for scripts) and cannot be shown again.")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", required=True, help="what the token is for, as its owner will see it")
        parser.add_argument("--expires-days", type=int, default=None, help="days until it expires (default: never)")
        parser.add_argument("--agents", default=None,
                            help="comma-separated agent slugs it may reach (default: every agent)")

    def handle(self, *args, username, name, expires_days, agents, **options):
        migrate_if_needed()  # a fresh state root: no such user or session, not a missing table
        User = get_user_model()
        user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive")
        if not name.strip():
            raise CommandError("--name must not be blank")
        scope = None if agents is None else [slug.strip() for slug in agents.split(",") if slug.strip()]
        try:
            token, secret = PersonalToken.issue(user, name.strip()[:100], expires_days=expires_days, agents=scope)
        except TokenError as exc:
            raise CommandError(str(exc)) from None
        expiry = f"expires {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else "never expires"
        reach = "agents " + ", ".join(token.agents) if token.agents else "every agent"
        self.stdout.write(f"Token {token.id} ({token.name!r}) for {username}: {reach}; {expiry}. "
                          "Keep it now: it is not shown again.")
        self.stdout.write(secret)
