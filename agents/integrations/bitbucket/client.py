"""Bitbucket's REST API (Cloud and Data Center): the channel's config and a client that replies
with pull request comments."""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from agents.integrations.bitbucket.protocol import Edition
from agents.integrations.config import ProviderConfig
from agents.integrations.outbound import OutboundClient

CLOUD_API_URL = "https://api.bitbucket.org/2.0"
SLUG = re.compile(r"[A-Za-z0-9_.~-]+")


@dataclass(frozen=True)
class BitbucketConfig(ProviderConfig):
    webhook_secret_env: str = "BITBUCKET_WEBHOOK_SECRET"
    token_env: str = "BITBUCKET_TOKEN"
    # Set for Basic auth (Cloud: the account email with an API token or app
    # password; Data Center: a username); unset, the token is a Bearer token.
    username_env: str = "BITBUCKET_USERNAME"
    edition: Edition = "cloud"
    # Empty: $BITBUCKET_API_URL, else Cloud's. Data Center: https://<host>/rest/api/1.0
    api_url: str = ""

    def webhook_secret(self) -> str | None:
        return self.secret("webhook_secret_env")

    def api_base(self) -> str:
        url = self.api_url or self.env("BITBUCKET_API_URL") or (CLOUD_API_URL if self.edition == "cloud" else "")
        if not url:
            raise LookupError("Bitbucket Data Center needs api_url (https://<host>/rest/api/1.0) or BITBUCKET_API_URL")
        return url.rstrip("/")

    def client(self, *, outbound: OutboundClient | None = None) -> "BitbucketClient":
        token = self.secret("token_env")
        if not token:
            raise LookupError(f"no Bitbucket token: set {self.token_env}")
        return BitbucketClient(self.edition, self.api_base(), token, username=self.secret("username_env"),
                               outbound=outbound)


class BitbucketClient:
    """Pull request comments on either edition, with one interface.

    Cloud: `{api}/repositories/{workspace}/{repo}/pullrequests/{id}/comments`;
    Data Center: `{api}/projects/{key}/repos/{slug}/pull-requests/{id}/comments`.
    """

    def __init__(self, edition: Edition, api_url: str, token: str, *, username: str | None = None,
                 outbound: OutboundClient | None = None):
        if edition not in ("cloud", "datacenter"):
            raise ValueError(f"edition must be 'cloud' or 'datacenter', not {edition!r}")
        self.edition = edition
        self.api_url = api_url.rstrip("/")
        self._authorization = (
            "Basic " + base64.b64encode(f"{username}:{token}".encode()).decode() if username else f"Bearer {token}"
        )
        self.outbound = outbound or OutboundClient()

    def __repr__(self) -> str:
        return f"BitbucketClient({self.edition!r}, {self.api_url!r})"

    def create_pull_request_comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        """A comment on pull request `number` of `repo` (workspace/repo or PROJECT/repo); returns it."""
        if self.edition == "cloud":
            return self.call("POST", f"{self.pull_request_path(repo, number)}/comments",
                             json={"content": {"raw": body}})
        return self.call("POST", f"{self.pull_request_path(repo, number)}/comments", json={"text": body})

    def update_pull_request_comment(self, repo: str, number: int, comment_id: int, body: str, *,
                                    version: int | None = None) -> dict[str, Any]:
        """Edit a comment. Data Center needs the comment's current `version`
        (fetched when not given); Cloud has none."""
        path = f"{self.pull_request_path(repo, number)}/comments/{int(comment_id)}"
        if self.edition == "cloud":
            return self.call("PUT", path, json={"content": {"raw": body}})
        if version is None:
            version = int(self.call("GET", path)["version"])
        return self.call("PUT", path, json={"text": body, "version": version})

    def pull_request_path(self, repo: str, number: int) -> str:
        owner, slug = repo_parts(repo)
        if self.edition == "cloud":
            return f"/repositories/{owner}/{slug}/pullrequests/{int(number)}"
        return f"/projects/{owner}/repos/{slug}/pull-requests/{int(number)}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.outbound.request_json(method, self.api_url + path,
                                          headers={"authorization": self._authorization,
                                                   "accept": "application/json"}, **kwargs)


def repo_parts(repo: str) -> tuple[str, str]:
    owner, _, slug = repo.partition("/")
    if not (SLUG.fullmatch(owner) and SLUG.fullmatch(slug)) or {owner, slug} & {".", ".."}:
        raise ValueError(f"not a repository name (workspace/repo or PROJECT/repo): {repo!r}")
    return quote(owner, safe=""), quote(slug, safe="")
