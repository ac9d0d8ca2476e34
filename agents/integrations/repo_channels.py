"""The channel of code hosts, shared by `github_channel(...)`, `gitlab_channel(...)` and
`bitbucket_channel(...)` (each in its integration's `channel` module).

    # agent/channels/github.py: served at POST /<slug>/v1/channels/github
    from agents.sdk import default_auth, github_channel

    def review(ctx, event):
        return {"auth": default_auth(event)} if event.action in ("opened", "synchronize") else None

    channel = github_channel(on_pull_request=review)

Each builds a `Channel` with one raw POST route that takes the provider's
webhook deliveries, and an events map that answers on the provider
(`agents.integrations.repo_replies`). A delivery goes through:

1. Verification over the raw bytes when the secret is configured (GitHub's
   X-Hub-Signature-256, GitLab's X-Gitlab-Token, Bitbucket's X-Hub-Signature);
   without one, only a direct loopback caller of a `serve --dev` server is
   admitted (fixtures), anyone else gets 401 naming the variable to set.
2. Parsing into a `RepoEvent`; a ping is answered 200.
3. A delivery id seen before is answered 200 `{"duplicate": true}`; a bot
   sender is skipped (the agent's own comments must not wake it again).
4. The hook of the event's kind decides: None skips (200), `{"auth": principal}`
   starts or continues the model turn of the event's continuation key (202;
   queued behind a running turn unless `"admission": "preempt"`),
   `{"task": fn}` hands `fn(ctx, event)` to a worker (202). The delivery is
   claimed in the same transaction as the turn or task, so a redelivery, or
   two copies racing, act once.

Hook mapping (every hook gets `(ctx, event)`; `on_event` gets what no other takes):

    normalized kind   GitHub                         GitLab                  Bitbucket
    on_pull_request   pull_request                   merge_request           pullrequest:* / pr:*
    on_comment        issue_comment, review comment  note                    pull request comments
    on_issue          issues                         issue, work_item        -
    on_check_suite    check_suite                    -                       -
    on_check_run      check_run                      -                       -
    on_workflow_run   workflow_run                   -                       -
    on_status         status                         -                       -
    on_pipeline       -                              pipeline                -
    on_push           push                           push, tag_push          repo:push, repo:refs_changed
"""
from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from django.http import JsonResponse

from agents.channels import POST, Channel, channel_module, public_endpoint
from agents.errors import error_response
from agents.integrations.bitbucket import protocol as bitbucket
from agents.integrations.events import EventKind, RepoEvent, SignatureError, Subject, WebhookError, header
from agents.integrations.github import protocol as github
from agents.integrations.gitlab import protocol as gitlab
from agents.integrations.repo_replies import reply_events
from agents.modules import function_by_name, release_namespace

log = logging.getLogger(__name__)

Hook = Callable[[Any, RepoEvent], Any]

# Kinds a bot's own action can cause (its comments, pull requests, issues, pushes): a bot sender
# is skipped for these by default. CI events (check suites and runs, workflow runs, statuses) come
# from bots as a rule, so they pass; a status this channel set itself is skipped by its context.
LOOP_KINDS = frozenset({EventKind.PULL_REQUEST, EventKind.COMMENT, EventKind.ISSUES, EventKind.PUSH,
                        EventKind.PIPELINE})
HOOK_FOR_KIND = {
    EventKind.PULL_REQUEST: "on_pull_request", EventKind.COMMENT: "on_comment", EventKind.ISSUES: "on_issue",
    EventKind.CHECK_SUITE: "on_check_suite", EventKind.CHECK_RUN: "on_check_run",
    EventKind.WORKFLOW_RUN: "on_workflow_run", EventKind.STATUS: "on_status", EventKind.PIPELINE: "on_pipeline",
    EventKind.PUSH: "on_push",
}
LABELS = {"github": "GitHub", "gitlab": "GitLab", "bitbucket": "Bitbucket"}


@dataclass(frozen=True)
class Provider:
    """What differs between code hosts on the inbound side."""

    name: str
    secret_field: str                       # the config's `*_env` field naming the webhook secret
    verify: Callable[[Any, Mapping[str, str], bytes], None]
    parse: Callable[[Mapping[str, str], bytes], RepoEvent]
    # Headers a worker needs to parse a stored delivery again.
    headers: tuple[str, ...]
    pings: frozenset[str] = frozenset()


PROVIDERS = {
    "github": Provider(
        "github", "webhook_secret_env",
        lambda config, headers, body: github.verify_signature(config.webhook_secret(), headers, body),
        github.parse_delivery, ("X-GitHub-Event", "X-GitHub-Delivery", "Content-Type"), frozenset({"ping"})),
    "gitlab": Provider(
        "gitlab", "webhook_token_env",
        lambda config, headers, body: gitlab.verify_token(config.webhook_token(), headers),
        gitlab.parse_delivery, ("X-Gitlab-Event", "X-Gitlab-Event-UUID")),
    "bitbucket": Provider(
        "bitbucket", "webhook_secret_env",
        lambda config, headers, body: bitbucket.verify_signature(config.webhook_secret(), headers, body),
        bitbucket.parse_delivery, ("X-Event-Key", "X-Request-UUID", "X-Request-Id"),
        frozenset({"diagnostics:ping"})),
}


def default_auth(event: RepoEvent) -> dict[str, Any]:
    """The principal a turn runs as: the event's sender (`github:mona`, authenticator `github`)."""
    login = event.sender_login or "unknown"
    return {"principal_id": f"{event.provider}:{login}", "authenticator": event.provider,
            "principal_type": "bot" if event.sender_is_bot else "user",
            "attributes": {"login": event.sender_login, "repo": event.repo}}


def message_for(event: RepoEvent) -> str:
    """The model's input for an event: what happened, where, by whom, and the text it carries."""
    label = LABELS.get(event.provider, event.provider)
    # GitLab's header names the hook ("Note Hook"); its object_kind names the event.
    name = str(event.payload.get("object_kind") or event.event) if event.provider == "gitlab" else event.event
    what = name + (f" ({event.action})" if event.action else "")
    by = f" by @{event.sender_login}" if event.sender_login else ""
    lines = [f"{label} {what} on {where(event)}{by}."]
    for name, value in (("Title", event.title), ("Conclusion", event.conclusion), ("Branch", event.ref),
                        ("Head commit", event.head_sha), ("URL", event.html_url)):
        if value:
            lines.append(f"{name}: {value}")
    if event.kind is EventKind.COMMENT and event.comment:
        lines += ["", "Comment:", event.comment]
    if event.body:
        lines += ["", "Description:", event.body]
    return "\n".join(lines)


def where(event: RepoEvent) -> str:
    if event.subject is Subject.PULL_REQUEST and event.number is not None:
        if event.provider == "gitlab":
            return f"merge request {event.repo}!{event.number}"
        return f"pull request {event.repo}#{event.number}"
    if event.subject is Subject.ISSUE and event.number is not None:
        return f"issue {event.repo}#{event.number}"
    if event.head_sha:
        return f"commit {event.repo}@{event.head_sha[:12]}"
    return event.repo or "the repository"


def title_for(event: RepoEvent) -> str:
    place = where(event).split(" ", 2)[-1] if event.number is not None else where(event)
    return f"{place}: {event.title}"[:200] if event.title else place[:200]


def state_for(event: RepoEvent) -> dict[str, Any]:
    """What the events map needs to answer: where the conversation lives on the provider."""
    return {"provider": event.provider, "repo": event.repo,
            "subject": str(event.subject) if event.subject else None, "number": event.number,
            "head_sha": event.head_sha, "installation_id": event.installation_id,
            "html_url": event.html_url}


@dataclass(frozen=True)
class RepoWebhook:
    """The route handler of a code-host channel (see the module docstring for its steps)."""

    provider: Provider
    config: Any
    hooks: Mapping[str, Hook]
    skip_bots: bool = True
    ignore_senders: frozenset[str] = frozenset()
    status_context: str = ""

    def __call__(self, req: Any) -> Any:
        refused = self.check(req)
        if refused is not None:
            return refused
        try:
            event = self.provider.parse(req.headers, req.raw_body)
        except WebhookError as exc:
            return error_response(exc.status, "invalid_payload", str(exc))
        if event.event in self.provider.pings:
            return {"pong": True}
        delivery = event.delivery_id
        if delivery and req.delivery_seen(delivery):
            return {"duplicate": True, "deliveryId": delivery}
        reason = self.skip_reason(event, req)
        if reason:
            return {"skipped": reason, "deliveryId": delivery or None}
        if self.hook_for(event) is None:
            return {"skipped": f"no hook takes {event.kind} events", "deliveryId": delivery or None}
        decision = self.decide(req, event)
        if decision is None:
            return {"skipped": "the hook returned None", "deliveryId": delivery or None}
        return self.act(req, event, decision)

    def check(self, req: Any) -> JsonResponse | None:
        """Step 1: verified, or unsigned from a loopback caller under `serve --dev`."""
        env_name = getattr(self.config, self.provider.secret_field)
        if self.config.env(env_name) is not None:
            try:
                self.provider.verify(self.config, req.headers, req.raw_body)
            except SignatureError as exc:
                return error_response(exc.status, "invalid_signature", str(exc))
            except WebhookError as exc:
                return error_response(exc.status, "invalid_payload", str(exc))
            return None
        if req.dev_loopback:
            return None
        return error_response(401, "webhook_secret_not_configured",
                     f"no webhook secret is configured: set {env_name} on the server to the secret the "
                     f"{LABELS[self.provider.name]} webhook signs with (unsigned deliveries are accepted only "
                     "from a loopback caller of `serve --dev`)")

    def skip_reason(self, event: RepoEvent, req: Any) -> str:
        if event.sender_login and event.sender_login.lower() in self.ignore_senders:
            return f"sender {event.sender_login} is ignored"
        if self.skip_bots and event.kind in LOOP_KINDS and event.sender_is_bot:
            return f"bot sender {event.sender_login or '(unnamed)'}"
        if event.kind is EventKind.STATUS and self.status_context and event.title == self.context_for(req):
            return "a status this channel set"
        return ""

    def context_for(self, req: Any) -> str:
        return self.status_context.replace("{slug}", req.agent.slug)

    def hook_for(self, event: RepoEvent) -> Hook | None:
        """The hook of the event's kind, else `on_event`."""
        return self.hooks.get(HOOK_FOR_KIND.get(event.kind, ""), self.hooks.get("on_event"))

    def decide(self, ctx: Any, event: RepoEvent) -> Mapping[str, Any] | None:
        """The hook's answer for `event`, checked: None, {"auth": ...} or {"task": fn}."""
        hook = self.hook_for(event)
        if hook is None:
            return None
        decision = hook(ctx, event)
        if decision is None:
            return None
        if not isinstance(decision, Mapping) or ("auth" in decision) == ("task" in decision):
            raise TypeError(f"a {self.provider.name} channel hook returns None, {{'auth': principal}} "
                            f"or {{'task': fn}}, not {decision!r}")
        if "task" in decision and not callable(decision["task"]):
            raise TypeError("{'task': fn}: fn must be a function fn(ctx, event)")
        if decision.get("admission", "coalesce") not in ("coalesce", "preempt"):
            raise TypeError("{'auth': ..., 'admission': ...} is 'coalesce' (the default: queue behind a running "
                            "turn) or 'preempt' (interrupt it and drop what is queued)")
        return decision

    def act(self, req: Any, event: RepoEvent, decision: Mapping[str, Any]) -> JsonResponse:
        delivery = event.delivery_id
        if "task" in decision:
            with req.atomic():
                if delivery and not req.claim_delivery(delivery):
                    return JsonResponse({"duplicate": True, "deliveryId": delivery})
                req.wait_until(run_task, self.provider.name, stored_headers(self.provider, req.headers),
                               base64.b64encode(req.raw_body).decode(), task_reference(decision["task"]),
                               req.agent.active_deployment_id)
            return JsonResponse({"task": True, "deliveryId": delivery or None}, status=202)
        files = decision.get("workspace_files") or []
        if callable(files):
            files = files(event)
        message = decision.get("message") or message_for(event)
        state = state_for(event)
        with req.atomic():
            if delivery and not req.claim_delivery(delivery):
                return JsonResponse({"duplicate": True, "deliveryId": delivery})
            handle = req.send(message, continuation_token=event.continuation_key,
                              admission=decision.get("admission", "coalesce"),
                              auth=decision["auth"], state=state, title=title_for(event),
                              workspace_files=list(files) or None)
            if not handle.created:
                handle.state.update({k: v for k, v in state.items()
                                     if k in ("head_sha", "installation_id") and v})
        return JsonResponse({"sessionId": handle.session_id, "created": handle.created,
                             "deliveryId": delivery or None}, status=202)


def stored_headers(provider: Provider, headers: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name in provider.headers if (value := header(headers, name)) is not None}


def task_reference(task: Callable[..., Any]) -> dict[str, str] | None:
    """A module-level function of the agent folder by name; None: the worker asks the hook again."""
    module, qualname = getattr(task, "__module__", "") or "", getattr(task, "__qualname__", "") or ""
    if module.startswith("agentsite_agents.") and "<" not in qualname:
        return {"module": module, "qualname": qualname}
    return None


def run_task(ctx: Any, provider: str, headers: dict[str, str], body: str, reference: dict[str, str] | None,
             deployment_id: int | None) -> None:
    """The worker's side of `{"task": fn}`: parse the stored delivery again and call `fn(ctx, event)`.

    A module-level task is found by name in the release (already imported by the task runner);
    a lambda or closure is found by asking the channel's hook again, on the same event, in the
    release that took the delivery: its channel module is found by name the same way.
    """
    event = PROVIDERS[provider].parse(headers, base64.b64decode(body))
    if reference is not None:
        function_by_name(reference["module"], reference["qualname"])(ctx, event)
        return
    deployment = ctx.agent.deployments.get(pk=deployment_id)
    namespace = release_namespace(ctx.agent.slug, deployment.content_hash)
    declared = function_by_name(channel_module(namespace, ctx.channel_id), "channel")
    webhook = next(r.handler for r in declared.routes if isinstance(r.handler, RepoWebhook))
    decision = webhook.decide(ctx, event)
    if decision is None or "task" not in decision:
        log.warning("channel %s: the hook no longer asks for a task on delivery %s", ctx.channel_id,
                    event.delivery_id)
        return
    decision["task"](ctx, event)


@dataclass
class Declared:
    """The parts every code-host channel takes besides its hooks."""

    hooks: dict[str, Hook] = field(default_factory=dict)
    skip_bots: bool = True
    ignore_senders: tuple[str, ...] = ()
    commit_status: bool | str = False
    auth: Any = None
    events: Mapping[str, Any] | None = None
    state: Mapping[str, Any] | None = None
    on_start: Callable[[Any], Any] | None = None
    on_stop: Callable[[], Any] | None = None
    description: str = ""


def build_channel(provider: str, config: Any, declared: Declared) -> Channel:
    for name, hook in declared.hooks.items():
        if hook is not None and not callable(hook):
            raise TypeError(f"{name}= must be a function hook(ctx, event)")
    hooks = {name: hook for name, hook in declared.hooks.items() if hook is not None}
    context = ""
    if declared.commit_status:
        context = declared.commit_status if isinstance(declared.commit_status, str) else "agentsite/{slug}"
    webhook = RepoWebhook(PROVIDERS[provider], config, hooks, skip_bots=declared.skip_bots,
                          ignore_senders=frozenset(s.lower() for s in declared.ignore_senders),
                          status_context=context)
    events = reply_events(provider, config, context)
    for key, handler in (declared.events or {}).items():
        events[key] = _both(events[key], handler) if key in events else handler
    label = LABELS[provider]
    return Channel(routes=[POST("/", raw=True, handler=webhook, description=f"{label} webhook deliveries")],
                   auth=[public_endpoint()] if declared.auth is None else declared.auth,
                   events=events, state=dict(declared.state or {}), on_start=declared.on_start,
                   on_stop=declared.on_stop, description=declared.description or f"{label} webhooks",
                   kind=provider, config=config,
                   # Deliveries come from the code host (signed), on behalf of whoever acted: a pull
                   # request's conversation is everyone's who comments on it.
                   shared_sessions=True)


def _both(first: Callable[..., Any], second: Callable[..., Any]) -> Callable[..., Any]:
    def handle(event: dict[str, Any], channel: Any, ctx: Any) -> None:
        try:
            first(event, channel, ctx)
        finally:
            second(event, channel, ctx)
    return handle


def config_from(cls: type, builder: str, config: Any, config_fields: dict[str, Any], hooks: dict[str, Any]) -> Any:
    """`config`, or one built from keyword fields, refusing a word that is neither a field nor a hook."""
    if config is not None:
        if config_fields:
            raise TypeError(f"{builder}(): give config= or its fields ({', '.join(sorted(config_fields))}), not both")
        if not isinstance(config, cls):
            raise TypeError(f"{builder}(config=...) takes a {cls.__name__}")
        return config
    known = {f for f in getattr(cls, "__dataclass_fields__", {}) if f != "environ"}
    unknown = sorted(set(config_fields) - known)
    if unknown:
        raise TypeError(f"{builder}() does not take {', '.join(unknown)}: its hooks are {', '.join(hooks)}, "
                        f"its config fields {', '.join(sorted(known))}")
    return cls(**config_fields)


__all__ = ["Declared", "RepoEvent", "build_channel", "config_from", "default_auth", "message_for", "run_task"]
