"""GitHub's REST API: the channel's config and credentials, and a client that replies.

Works with GitHub.com and GitHub Enterprise Server (`api_url` =
`https://<host>/api/v3`). Outbound calls authenticate as a GitHub App
installation when `GITHUB_APP_ID` and a private key are configured, else
with `GITHUB_TOKEN`.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from agents.integrations.config import ProviderConfig
from agents.integrations.outbound import OutboundClient

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
REPO_NAME = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
COMMIT_STATES = ("error", "failure", "pending", "success")
Clock = Callable[[], float]


@dataclass(frozen=True)
class GitHubConfig(ProviderConfig):
    webhook_secret_env: str = "GITHUB_WEBHOOK_SECRET"
    token_env: str = "GITHUB_TOKEN"
    app_id_env: str = "GITHUB_APP_ID"
    private_key_env: str = "GITHUB_APP_PRIVATE_KEY"
    private_key_path_env: str = "GITHUB_APP_PRIVATE_KEY_PATH"
    # Empty: $GITHUB_API_URL, else api.github.com. Enterprise: https://<host>/api/v3
    api_url: str = ""

    def webhook_secret(self) -> str | None:
        return self.secret("webhook_secret_env")

    def api_base(self) -> str:
        return self.api_base_from("GITHUB_API_URL", DEFAULT_API_URL)

    def private_key(self) -> str | None:
        """The App's PEM key: inline (with `\\n` escapes allowed, as .env files
        write them) or read from the file the path variable names."""
        inline = self.secret("private_key_env")
        if inline:
            return inline.replace("\\n", "\n") if "\\n" in inline else inline
        path = self.secret("private_key_path_env")
        return Path(path).expanduser().read_text() if path else None

    def auth(self, *, clock: Clock = time.time) -> "GitHubApp | TokenAuth | None":
        """App credentials if configured (preferred), else the token, else None."""
        app_id, key = self.secret("app_id_env"), self.private_key()
        if app_id and key:
            return GitHubApp(app_id=app_id, private_key=key, clock=clock)
        token = self.secret("token_env")
        return TokenAuth(token) if token else None

    def client(self, *, outbound: OutboundClient | None = None, installation_id: int | None = None,
               clock: Clock = time.time) -> "GitHubClient":
        auth = self.auth(clock=clock)
        if auth is None:
            raise LookupError(f"no GitHub credentials: set {self.app_id_env} with {self.private_key_env} "
                              f"(or {self.private_key_path_env}), or {self.token_env}")
        return GitHubClient(self.api_base(), auth, outbound=outbound, installation_id=installation_id)


@dataclass(frozen=True)
class TokenAuth:
    token: str = field(repr=False)


@dataclass
class InstallationToken:
    token: str = field(repr=False)
    expires_at: float


class TokenCache:
    """Installation tokens by (api, app, installation), kept until shortly
    before they expire. Per process: a token is cheap to mint again."""

    def __init__(self, margin_seconds: float = 300):
        self.margin_seconds = margin_seconds
        self._tokens: dict[tuple[str, str, int], InstallationToken] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, int], now: float) -> str | None:
        with self._lock:
            cached = self._tokens.get(key)
            return cached.token if cached and cached.expires_at - self.margin_seconds > now else None

    def put(self, key: tuple[str, str, int], token: InstallationToken) -> None:
        with self._lock:
            self._tokens[key] = token

    def clear(self) -> None:
        with self._lock:
            self._tokens.clear()


INSTALLATION_TOKENS = TokenCache()


@dataclass(frozen=True)
class GitHubApp:
    """A GitHub App: signs its own JWTs and exchanges them for installation tokens."""

    app_id: str
    private_key: str = field(repr=False)
    clock: Clock = field(default=time.time, repr=False, compare=False)
    tokens: TokenCache = field(default=INSTALLATION_TOKENS, repr=False, compare=False)

    def jwt(self) -> str:
        """The App's JWT (RS256): issued a minute in the past against clock
        drift, expiring in nine minutes (GitHub refuses more than ten)."""
        import jwt  # PyJWT loads cryptography's RSA and X.509: only a process that signs as an App pays for it

        now = int(self.clock())
        return jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(self.app_id)}, self.private_key,
                          algorithm="RS256")


class GitHubClient:
    """The REST calls channels reply with. Every request goes through the
    outbound guard; errors raise OutboundHTTPError (status and body)."""

    def __init__(self, api_url: str, auth: GitHubApp | TokenAuth, *, outbound: OutboundClient | None = None,
                 installation_id: int | None = None):
        self.api_url = api_url.rstrip("/")
        self.auth = auth
        self.outbound = outbound or OutboundClient()
        self.installation_id = installation_id
        self._installations: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"GitHubClient({self.api_url!r}, {self.auth!r})"

    # Replies

    def create_comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        """A comment on an issue or pull request's conversation; returns it (id, html_url)."""
        return self.call("POST", f"/repos/{repo_path(repo)}/issues/{int(number)}/comments", repo=repo,
                         json={"body": body})

    def update_comment(self, repo: str, comment_id: int, body: str) -> dict[str, Any]:
        return self.call("PATCH", f"/repos/{repo_path(repo)}/issues/comments/{int(comment_id)}", repo=repo,
                         json={"body": body})

    def set_commit_status(self, repo: str, sha: str, state: str, *, context: str = "agentsite",
                          description: str = "", target_url: str = "") -> dict[str, Any]:
        """A commit status (error, failure, pending or success) under `context`."""
        if state not in COMMIT_STATES:
            raise ValueError(f"state must be one of {', '.join(COMMIT_STATES)}, not {state!r}")
        if not re.fullmatch(r"[0-9a-fA-F]{7,64}", sha):
            raise ValueError(f"not a commit sha: {sha!r}")
        payload: dict[str, str] = {"state": state, "context": context}
        if description:
            payload["description"] = description if len(description) <= 140 else description[:139] + "…"
        if target_url:
            payload["target_url"] = target_url
        return self.call("POST", f"/repos/{repo_path(repo)}/statuses/{sha}", repo=repo, json=payload)

    # Plumbing

    def call(self, method: str, path: str, *, repo: str | None = None, **kwargs: Any) -> Any:
        """Any REST call, authenticated; `repo` picks the App installation."""
        headers = {**base_headers(), "authorization": f"Bearer {self.token_for(repo)}"}
        return self.outbound.request_json(method, self.api_url + path, headers=headers, **kwargs)

    def token_for(self, repo: str | None = None) -> str:
        if isinstance(self.auth, TokenAuth):
            return self.auth.token
        installation = self.installation_id or self.installation_for(repo)
        return self.installation_token(installation)

    def installation_for(self, repo: str | None) -> int:
        """The App's installation on `repo` (looked up once with the App JWT)."""
        if not repo:
            raise LookupError("a GitHub App call needs the installation id or the repository")
        if repo not in self._installations:
            found = self.app_call("GET", f"/repos/{repo_path(repo)}/installation")
            self._installations[repo] = int(found["id"])
        return self._installations[repo]

    def installation_token(self, installation_id: int) -> str:
        """A cached installation token, or a new one from the JWT exchange."""
        assert isinstance(self.auth, GitHubApp)
        key = (self.api_url, str(self.auth.app_id), int(installation_id))
        now = self.auth.clock()
        token = self.auth.tokens.get(key, now)
        if token:
            return token
        issued = self.app_call("POST", f"/app/installations/{int(installation_id)}/access_tokens")
        expires_at = datetime.fromisoformat(issued["expires_at"].replace("Z", "+00:00")).timestamp()
        self.auth.tokens.put(key, InstallationToken(issued["token"], expires_at))
        return issued["token"]

    def app_call(self, method: str, path: str, **kwargs: Any) -> Any:
        """A call authenticated as the App itself (its JWT)."""
        assert isinstance(self.auth, GitHubApp), "App calls need App credentials"
        headers = {**base_headers(), "authorization": f"Bearer {self.auth.jwt()}"}
        return self.outbound.request_json(method, self.api_url + path, headers=headers, **kwargs)


def base_headers() -> dict[str, str]:
    return {"accept": "application/vnd.github+json", "x-github-api-version": API_VERSION}


def repo_path(repo: str) -> str:
    """`owner/repo` checked and quoted for a URL path (no `..`, no extra segments)."""
    if not REPO_NAME.fullmatch(repo) or any(part in (".", "..") for part in repo.split("/")):
        raise ValueError(f"not a repository name (owner/repo): {repo!r}")
    return "/".join(quote(part, safe="") for part in repo.split("/"))
