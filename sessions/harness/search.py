"""`web_search`: results from the search backend the operator configures.

`AGENTSITE_SEARCH_BACKEND` names it:

- `searxng:<base URL>`: a SearXNG instance's JSON API (`<base>/search?q=...&format=json`; the
  instance must allow the `json` format), self-hosted, often on the operator's own network;
- `brave` (or `brave:<base URL>` for a proxy in front of it): the Brave Search API, its key in
  `BRAVE_SEARCH_API_KEY` (an agent secret, else the environment).

The backend is the operator's, like a model provider: it is reached directly, not through the
agent's egress door (whose allowed domains and private-address rules are about URLs a model
chose). Without a backend, or without the key it needs, the tool is not offered, and /info says why.
Results are title, URL and snippet, marked untrusted as web_fetch's content is.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from pydantic import BaseModel, Field

from agents.secrets.lookup import credential
from sessions.harness.fetch import NOTICE

SEARCH_SECONDS = 15.0
MAX_RESULTS = 20
BRAVE_URL = "https://api.search.brave.com"
BRAVE_KEY = "BRAVE_SEARCH_API_KEY"
LOOPBACK = ("127.0.0.1", "::1", "localhost")  # a proxy on this machine may take the key over plain HTTP


class WebSearchInput(BaseModel):
    query: str = Field(min_length=1, max_length=400, description="What to search the web for")
    max_results: int = Field(default=5, ge=1, le=MAX_RESULTS, description=f"At most this many results (up to {MAX_RESULTS})")


class SearchFailed(RuntimeError):
    """The backend did not answer with results: what the model is told."""


def backend() -> tuple[str, str] | None:
    """(kind, base URL) of the configured backend; None when none is set."""
    configured = settings.AGENTSITE_SEARCH_BACKEND.strip()
    if not configured:
        return None
    kind, _, base = configured.partition(":")
    return kind, (base or (BRAVE_URL if kind == "brave" else "")).rstrip("/")


def unavailable() -> str | None:
    """Why web_search cannot be offered on this server now; None when it can."""
    found = backend()
    if found is None:
        return "no search backend: the operator sets AGENTSITE_SEARCH_BACKEND (searxng:<URL> or brave)"
    kind, base = found
    if kind not in ("searxng", "brave"):
        return f"AGENTSITE_SEARCH_BACKEND names {kind!r}: it must be searxng:<URL> or brave"
    if not base.startswith(("http://", "https://")):
        return f"AGENTSITE_SEARCH_BACKEND gives {kind} no http(s) URL: write {kind}:https://..."
    if kind == "brave" and base.startswith("http://") and urlsplit(base).hostname not in LOOPBACK:
        return f"the brave search backend's key would travel in the clear: write brave:https://... (not {base})"
    if kind == "brave" and not credential(BRAVE_KEY):
        return f"the brave search backend needs {BRAVE_KEY} (an agent secret or the server's environment)"
    return None


def web_search(input: WebSearchInput, ctx) -> dict[str, Any]:
    import httpx

    if (why := unavailable()) is not None:
        raise SearchFailed(why)
    kind, base = backend()
    try:
        if kind == "searxng":
            answer = httpx.get(f"{base}/search", params={"q": input.query, "format": "json"}, timeout=SEARCH_SECONDS)
        else:
            answer = httpx.get(f"{base}/res/v1/web/search", params={"q": input.query, "count": input.max_results},
                               headers={"accept": "application/json", "x-subscription-token": credential(BRAVE_KEY)},
                               timeout=SEARCH_SECONDS)
    except httpx.HTTPError as exc:
        raise SearchFailed(f"the {kind} search backend did not answer: {type(exc).__name__}") from None
    if answer.status_code != 200:
        raise SearchFailed(f"the {kind} search backend answered HTTP {answer.status_code}")
    try:
        body = answer.json()
    except ValueError:
        raise SearchFailed(f"the {kind} search backend answered something other than JSON") from None
    found_results = body.get("results") if kind == "searxng" else (body.get("web") or {}).get("results")
    results = [{"title": str(r.get("title") or ""), "url": str(r.get("url") or ""),
                "snippet": str((r.get("content") if kind == "searxng" else r.get("description")) or "")}
               for r in (found_results or []) if isinstance(r, dict) and r.get("url")]
    return {"query": input.query, "backend": kind, "results": results[:input.max_results], "untrusted": True,
            "notice": NOTICE}
