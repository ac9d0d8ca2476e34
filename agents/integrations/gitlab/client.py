"""GitLab's REST API (GitLab.com and self-managed): the channel's config and a client that
replies with merge request and issue notes and sets commit statuses."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from agents.integrations.config import ProviderConfig
from agents.integrations.outbound import OutboundClient

DEFAULT_API_URL = "https://gitlab.com/api/v4"
PROJECT_PATH = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+|\d+")
COMMIT_STATES = ("pending", "running", "success", "failed", "canceled")


@dataclass(frozen=True)
class GitLabConfig(ProviderConfig):
    webhook_token_env: str = "GITLAB_WEBHOOK_TOKEN"
    token_env: str = "GITLAB_TOKEN"
    # Empty: $GITLAB_API_URL, else gitlab.com. Self-managed: https://<host>/api/v4
    api_url: str = ""

    def webhook_token(self) -> str | None:
        return self.secret("webhook_token_env")

    def api_base(self) -> str:
        return self.api_base_from("GITLAB_API_URL", DEFAULT_API_URL)

    def client(self, *, outbound: OutboundClient | None = None) -> "GitLabClient":
        token = self.secret("token_env")
        if not token:
            raise LookupError(f"no GitLab token: set {self.token_env}")
        return GitLabClient(self.api_base(), token, outbound=outbound)


class GitLabClient:
    """Notes and commit statuses through the REST API (`PRIVATE-TOKEN` auth:
    personal, project or group access tokens)."""

    def __init__(self, api_url: str, token: str, *, outbound: OutboundClient | None = None):
        self.api_url = api_url.rstrip("/")
        self._token = token
        self.outbound = outbound or OutboundClient()

    def __repr__(self) -> str:
        return f"GitLabClient({self.api_url!r})"

    def create_merge_request_note(self, project: str, iid: int, body: str) -> dict[str, Any]:
        """A note (comment) on merge request `iid` of `project` (path or id); returns it."""
        return self.call("POST", f"/projects/{project_path(project)}/merge_requests/{int(iid)}/notes",
                         json={"body": body})

    def update_merge_request_note(self, project: str, iid: int, note_id: int, body: str) -> dict[str, Any]:
        return self.call("PUT", f"/projects/{project_path(project)}/merge_requests/{int(iid)}/notes/{int(note_id)}",
                         json={"body": body})

    def create_issue_note(self, project: str, iid: int, body: str) -> dict[str, Any]:
        return self.call("POST", f"/projects/{project_path(project)}/issues/{int(iid)}/notes", json={"body": body})

    def set_commit_status(self, project: str, sha: str, state: str, *, name: str = "agentsite",
                          description: str = "", target_url: str = "") -> dict[str, Any]:
        if state not in COMMIT_STATES:
            raise ValueError(f"state must be one of {', '.join(COMMIT_STATES)}, not {state!r}")
        if not re.fullmatch(r"[0-9a-fA-F]{7,64}", sha):
            raise ValueError(f"not a commit sha: {sha!r}")
        payload = {"state": state, "name": name}
        if description:
            payload["description"] = description[:255]
        if target_url:
            payload["target_url"] = target_url
        return self.call("POST", f"/projects/{project_path(project)}/statuses/{sha}", json=payload)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.outbound.request_json(method, self.api_url + path,
                                          headers={"private-token": self._token}, **kwargs)


def project_path(project: str | int) -> str:
    """A project's path (`group/sub/project`) or id, checked and encoded as one URL segment."""
    value = str(project)
    if not PROJECT_PATH.fullmatch(value) or any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"not a project path or id: {value!r}")
    return quote(value, safe="")
