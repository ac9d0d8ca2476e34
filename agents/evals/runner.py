"""Running cases against a server's HTTP API: one session per case (`"purpose": "eval"`), cases on
threads up to the concurrency limit, each turn followed on its NDJSON stream until it ends or parks."""
from __future__ import annotations

import json
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

from agents.evals.cases import EvalCase
from agents.evals.costs import Cost
from agents.evals.gates import GateFailed
from agents.evals.stored import CaseList, as_eval_case
from agents.evals.trial import ENDED, Trial

TURN_TIMEOUT = 300.0


class EvalRunError(Exception):
    """The server refused or broke off: not a gate, but the case fails with it (`gate` is `error`)."""


class HttpConversation:
    """A session on `base_url` for agent `slug`: the first `send` creates it, the next ones follow up."""

    def __init__(self, client: httpx.Client, slug: str, timeout: float = TURN_TIMEOUT):
        self.client = client
        self.slug = slug
        self.timeout = timeout
        self.session_id: str | None = None
        self.playground_url: str | None = None
        self._stream_url = ""
        self._next_index = 0

    def send(self, message: str, files: list[dict[str, str]]) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"message": message}
        if files:
            body["workspaceFiles"] = files
        if self.session_id is None:
            response = self.client.post(f"/{self.slug}/v1/session", json={**body, "purpose": "eval"})
        else:
            response = self.client.post(f"/{self.slug}/v1/session/{self.session_id}/message", json=body)
        if response.status_code not in (201, 202):
            raise EvalRunError(f"the server answered {response.status_code}: {response.text[:300]}")
        created = response.json()
        self.session_id = created["sessionId"]
        self.playground_url = created.get("playgroundUrl")
        self._stream_url = f"/{self.slug}/v1/session/{self.session_id}/stream"
        return self._follow(created["turnId"])

    def _follow(self, turn_id: str) -> list[dict[str, Any]]:
        """The session's events from where the last turn left off until `turn_id` ends or parks."""
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                with self.client.stream("GET", self._stream_url, params={"startIndex": self._next_index},
                                        timeout=httpx.Timeout(10, read=max(1.0, deadline - time.monotonic()))) as response:
                    if response.status_code != 200:
                        raise EvalRunError(f"the stream answered {response.status_code}: {response.read()[:300]!r}")
                    for line in response.iter_lines():
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        self._next_index = event["index"] + 1
                        events.append(event)
                        if event.get("turnId") == turn_id and (
                                event["type"] in ENDED or event["type"] == "action.approval_requested"):
                            return events
            except httpx.TransportError:
                time.sleep(0.2)  # the stream broke off: resume from the last index seen
        raise EvalRunError(f"turn {turn_id} did not end within {self.timeout:.0f} s")


@dataclass
class CaseResult:
    id: str
    tags: tuple[str, ...]
    passed: bool
    duration: float
    session_id: str | None = None
    gate: str | None = None
    message: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    playground_url: str | None = None
    cost: Cost = field(default_factory=Cost)


def run_case(case: EvalCase, client: httpx.Client, slug: str) -> CaseResult:
    conversation = HttpConversation(client, slug)
    trial = Trial(conversation)
    started = time.monotonic()
    gate = message = None
    try:
        case.test(trial)
    except GateFailed as failure:
        gate, message = failure.gate, failure.message
    except EvalRunError as error:
        gate, message = "error", str(error)
    except Exception as error:  # the case's own code broke: shown with where
        where = traceback.extract_tb(error.__traceback__)[-1]
        gate, message = "error", f"{type(error).__name__}: {error} ({where.filename}:{where.lineno})"
    return CaseResult(id=case.id, tags=case.tags, passed=gate is None, duration=time.monotonic() - started,
                      session_id=conversation.session_id, gate=gate, message=message, tool_calls=trial.tool_calls,
                      metrics=trial.metrics, playground_url=conversation.playground_url,
                      cost=Cost.of_events(trial.events))


def run_cases(cases: list[EvalCase], *, base_url: str, slug: str, concurrency: int, token: str | None = None,
              on_done: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Every case, at most `concurrency` at once; results in the cases' order."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    with httpx.Client(base_url=base_url, headers=headers, timeout=30, limits=limits) as client:

        def one(case: EvalCase) -> CaseResult:
            result = run_case(case, client, slug)
            if on_done:
                on_done(result)
            return result

        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="eval") as pool:
            return list(pool.map(one, cases))


class CasesUnavailable(Exception):
    """The server's stored cases could not be read (refused, unknown agent, not a server of ours)."""


def fetch_cases(base_url: str, slug: str, token: str | None) -> list[EvalCase]:
    """The agent's cases kept in the admin of the server at `base_url`, read over REST, sorted by id."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{base_url}/v1/agents/{slug}/eval-cases"
    try:
        response = httpx.get(url, headers=headers, timeout=30)
    except httpx.HTTPError as error:
        raise CasesUnavailable(f"could not read {url}: {error}") from None
    if response.status_code != 200:
        try:
            said = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            said = response.text
        raise CasesUnavailable(f"{url} answered {response.status_code}: {said[:500]}")
    try:
        listed = CaseList.model_validate({"cases": response.json()["cases"]})
    except (ValueError, KeyError, TypeError) as error:  # pydantic's ValidationError is a ValueError
        raise CasesUnavailable(f"{url} did not answer with eval cases: {str(error)[:500]}") from None
    return sorted((as_eval_case(spec) for spec in listed.cases), key=lambda case: case.id)
