"""Who gets what at each door: route families × callers, as data.

The in-process test (`test_access_matrix.py`) asks every listed request as
every caller; the live test (`tests/agentsite/test_access_matrix_live.py`)
asks each family's first request as every caller of a production server
behind nginx; `docs/running-for-a-team.md` holds `docs_table()` verbatim,
which a test checks, so the page says what the tests hold.

The callers, on agent `support` where mia owns a session; a second agent,
`notes`, is deployed too. Both scoped tokens are an operator's, so a refusal
in their columns is the scope's doing, not the role's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

CALLERS = ("anonymous", "owner", "member", "operator", "scoped_here", "scoped_elsewhere", "metrics")
HEADINGS = {
    "anonymous": "no credentials", "owner": "member (own session)", "member": "another member",
    "operator": "operator", "scoped_here": "token scoped to the agent", "scoped_elsewhere": "token scoped elsewhere",
    "metrics": "metrics token",
}
SCOPED = ("scoped_here", "scoped_elsewhere")
LOGIN = 302  # a page sends whoever no policy admits to log in

SESSION = "{session}"  # mia's session on `support`, filled in by the tests

PUBLIC = dict.fromkeys(CALLERS, 200)
LISTING = {**PUBLIC, "anonymous": 401, "metrics": 401}
AGENT = {**LISTING, "scoped_elsewhere": 403}
OWN_SESSION = {**AGENT, "member": 403}
EVERY_SESSION = {**OWN_SESSION, "owner": 403}
OPERATORS = {**EVERY_SESSION, "scoped_here": 403}
ACCOUNT = {**LISTING, "scoped_here": 403, "scoped_elsewhere": 403}


def as_page(expected: dict[str, int]) -> dict[str, int]:
    return {caller: LOGIN if status == 401 else status for caller, status in expected.items()}


@dataclass(frozen=True)
class Family:
    name: str
    requests: tuple[str, ...]  # "GET /path"; the first is the one the live test asks
    expect: dict[str, int]
    # Where a scoped token's answer is filtered to its agents: text naming `support` that the
    # operator's answer holds and the token scoped elsewhere's must not.
    names_support: str = ""
    socket: bool = False
    # Requests whose status differs for some caller past the door, e.g. activating the release
    # already active (409): {request: {caller: status}}.
    past_the_door: dict[str, dict[str, int]] = field(default_factory=dict)

    def expected(self, request: str, caller: str) -> int:
        return self.past_the_door.get(request, {}).get(caller, self.expect[caller])


FAMILIES = (
    Family("Server liveness", ("GET /healthz",), PUBLIC),
    Family("Docs pages", ("GET /docs/", "GET /docs/http-api", "GET /docs/llms-full.txt"), PUBLIC),
    Family("Agent list", ("GET /v1/agents",), LISTING, names_support='"slug":"support"'),
    Family("API document", ("GET /api/schema/",), LISTING, names_support="/support/v1/tools/"),
    Family("API document viewer", ("GET /api/docs/",), as_page(LISTING)),
    Family("An agent's routes", ("GET /support/v1/info", "GET /support/v1/release", "GET /support/v1/health",
                                 "GET /support/v1/sessions", "GET /support/v1/abs/brief-replies"), AGENT),
    Family("A session's routes", (f"GET /support/v1/session/{SESSION}", f"GET /support/v1/session/{SESSION}/events",
                                  f"GET /support/v1/session/{SESSION}/approvals"), OWN_SESSION),
    Family("Session websocket", (f"WS /support/v1/session/{SESSION}/ws",), OWN_SESSION, socket=True),
    Family("Every principal's sessions", ("GET /support/v1/sessions?all=1",), EVERY_SESSION),
    Family("Playground agents page", ("GET /playground/",), as_page(LISTING), names_support='href="/playground/support"'),
    Family("Playground agent pages", ("GET /playground/support", "GET /playground/support/abs/brief-replies"),
           as_page(AGENT)),
    Family("Playground: every session", ("GET /playground/support?all=1",), as_page(EVERY_SESSION)),
    Family("Playground session pages", (f"GET /playground/support/session/{SESSION}",
                                        f"GET /playground/support/session/{SESSION}/trace",
                                        f"GET /playground/support/session/{SESSION}/eval-case",
                                        f"GET /playground/support?sessionId={SESSION}"), as_page(OWN_SESSION)),
    Family("Model directory", ("GET /v1/models",), OPERATORS),
    Family("Releases", ("GET /v1/agents/support/deployments", "GET /v1/agents/support/deployments/1",
                        "POST /v1/agents/support/deployments/1/activate"), OPERATORS,
           past_the_door={"POST /v1/agents/support/deployments/1/activate": {"operator": 409}}),
    Family("Agents as data", ("GET /v1/agents/support/definition",), OPERATORS,
           past_the_door={"GET /v1/agents/support/definition": {"operator": 409}}),
    Family("Eval cases kept in the admin", ("GET /v1/agents/support/eval-cases",), OPERATORS),
    Family("Agent editor pages", ("GET /playground/agents/new", "GET /playground/support/edit"), as_page(OPERATORS),
           past_the_door={"GET /playground/support/edit": {"operator": 409}}),
    Family("Secrets", ("GET /v1/agents/support/secrets", "GET /v1/agents/support/secrets/API_KEY"), OPERATORS,
           past_the_door={"GET /v1/agents/support/secrets/API_KEY": {"operator": 404}}),
    Family("Personal tokens", ("GET /v1/tokens",), ACCOUNT),
    Family("Metrics", ("GET /metrics",), {**OPERATORS, "metrics": 200}),
    Family("Dashboard", ("GET /admin/dashboard/",), as_page(OPERATORS)),
)


def cell(family: Family, caller: str) -> str:
    status = family.expect[caller]
    if status == LOGIN:
        return "login"
    if family.names_support and caller in SCOPED and status == 200:
        return "200, its agents"
    return str(status)


def docs_table() -> str:
    """The table of docs/running-for-a-team.md, as Markdown."""
    head = "| route family | requests | " + " | ".join(HEADINGS[c] for c in CALLERS) + " |"
    rule = "| --- | --- | " + " | ".join("---" for _ in CALLERS) + " |"
    rows = []
    for family in FAMILIES:
        shown = ", ".join(f"`{r.replace(SESSION, '<id>')}`" for r in family.requests)
        rows.append(f"| {family.name} | {shown} | " + " | ".join(cell(family, c) for c in CALLERS) + " |")
    return "\n".join([head, rule, *rows]) + "\n"
