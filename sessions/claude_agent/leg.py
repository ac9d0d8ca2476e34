"""One turn of a `claude-agent:` session, run on the official runtime in place of the own loop.

`ClaudeAgentLeg` answers what sessions.turn.engine asks of a loop (`run`,
`usage`, `reported_usage`, `model`) and turns the runtime's stream into the
same events, ToolCall rows and stored conversation as the own loop: each
model call is a step (its deltas, its reply, its usage), each call of the
agent's tools is an action with its result, and the turn's usage carries the
cost the SDK reports. The agent's tools reach the runtime as the MCP server
`agent`, in this process, and the runtime's own tools stand in for the
workspace verbs they do (sessions.claude_agent.builtins). The runtime asks
about every call before it runs it (a PreToolUse hook): that is where the
call is stored and announced, and where a gated call is deferred until
its decision, which parks the turn.
"""
from __future__ import annotations

import queue
import time
import uuid
from collections import defaultdict, deque
from typing import Any

from django.db import transaction

from agents.providers import claude_agent_names as names
from agents.providers import get_provider
from agents.providers.base import ProviderError, ToolCall
from sessions.claude_agent import home as homes
from sessions.claude_agent import pool
from sessions.claude_agent import transcript
from sessions.claude_agent.bridge import Asked, Child, Ended
from sessions.claude_agent.builtins import SUBAGENT_CANNOT_ASK, Builtins, announce, brief, report
from sessions.turn.tools import SUBAGENT_CANNOT_ANSWER
from sessions.claude_agent.proxy import ModelProxy
from sessions.claude_agent.steps import Steps
from sessions.models import ToolCall as ToolCallRow
from sessions.turn.runner import INTERRUPT_CHECK_SECONDS, Emitter, Interrupted, InterruptWatch, Parked, Profile
from sessions.turn.timings import TurnClock
from sessions.turn.tools import Executor, Prepared, tool_message
from sessions.turn.usage import Usage, add_usage, zero
from sessions.workspaces.store import Workspace

# How long a stopped runtime may take to end its response before its child is closed.
STOP_GRACE_SECONDS = 10.0
# How far a kept child's spending limit may be from what its budgets leave for it to run a follow-up.
BUDGET_TOLERANCE_USD = 1e-6
# The SDK's result subtypes, as the turn's failure codes.
RESULT_CODES = {"error_max_turns": "step_limit", "error_max_budget_usd": "budget_exceeded"}
# The runtime's reasons for a failed model call, as ProviderError codes.
MESSAGE_ERRORS = {"authentication_failed": "auth_error", "rate_limit": "rate_limited", "server_error": "server_error",
                  "billing_error": "auth_error", "invalid_request": "model_error"}


class ClaudeAgentLeg:
    def __init__(self, profile: Profile, executor: Executor, emitter: Emitter, interrupts: InterruptWatch,
                 usage: Usage, meter, workspace: Workspace, parked: dict[str, Any] | None = None,
                 clock: TurnClock | None = None):
        """`parked`: where a run that parked for approvals left the runtime (its transcript), to resume from;
        `clock`: the turn's, told how its child was had and of each model call."""
        self.profile = profile
        self.executor = executor
        self.emitter = emitter
        self.interrupts = interrupts
        self.usage: Usage = usage
        self.meter = meter
        self.workspace = workspace
        self.model = profile.model  # never another: the runtime is given no fallback model
        self.usage_by_model: dict[str, Usage] = {}
        self.natives = names.natives(workspace.loaded)
        self.builtins = Builtins(workspace, self.natives, executor.turn, emitter, executor.options.dry_run)
        self.clock = clock
        self.steps = Steps(emitter, profile.model, self.builtins.finished, clock)
        # Calls the runtime was allowed to make, waiting for it to make them, by the agent's tool name.
        self.allowed: dict[str, deque[tuple[Any, ToolCallRow]]] = defaultdict(deque)
        self.stopping = False
        self.parked = parked
        self.room = None  # what is left of the turn's tightest budget (None: it has none)

    def reported_usage(self) -> Usage:
        return self.usage

    def add_usage_of(self, other) -> None:
        """A subagent's loop (the `delegate` tool) counted in this turn's usage."""
        self.usage = add_usage(self.usage, other.usage)

    # -- the run -----------------------------------------------------------------------
    def run(self, messages: list[dict[str, Any]], first_step: int = 1) -> str:
        """Run the turn whose prompt is the last of `messages` (or resume a parked run of it);
        `messages` grows with what it adds. Raises Parked when a gated call waits for its decision."""
        # A spent budget stops the turn before the runtime starts; what is left of one bounds the runtime.
        self.room = self.meter.before_call()
        self.steps.step = first_step - 1
        session_id = self.executor.session.id
        began = time.monotonic()
        kept, how = None if self.parked else pool.take(session_id, self.key(), len(messages) - 1), "kept"
        if kept is not None and not self.bounded(kept):
            pool.close_aside(kept)
            kept = None
        try:
            if kept is None:
                how = "new"
                kept = self.start(messages[:-1])
        finally:  # a child that would not start is timed too
            if self.clock is not None:
                self.clock.span("runtime", how, began)
        keep = parked = False
        try:
            self.steps.asked = time.monotonic()
            # A parked run resumes with no prompt: the runtime asks again for the call it deferred, and goes on.
            kept.child.ask(None if self.parked else _prompt(messages[-1]))
            result = self.follow(kept.child, messages)
            if result is not None and result.stop_reason == "tool_deferred":
                self.charge(result, kept)
                parked = True  # its calls are asked about again when it resumes
                raise Parked(self.steps.step, [names.stored_name(result.deferred_tool_use.name)],
                             resume={"session": result.session_id,
                                     "transcript": _read_transcript(kept.home, kept.cwd, result.session_id)})
            keep = result is not None and not result.is_error and not self.stopping
        finally:
            if not parked:
                self.end_unfinished()
            if keep:  # for the session's next turn, if this process runs it soon
                kept.key, kept.seen, kept.turn_created = self.key(), len(messages), self.executor.turn.created_at
                pool.keep(session_id, kept)
            else:
                kept.close()
        return self.settle(result, kept)

    def bounded(self, kept: pool.Kept) -> bool:
        """Whether a kept child's runtime stops where the turn's budgets now say it must: what it may still
        spend is what is left of them (give or take rounding; other spending or a new window moves it)."""
        if self.room is None:
            return kept.limit is None
        return kept.limit is not None and abs(kept.limit - kept.cost - float(self.room)) <= BUDGET_TOLERANCE_USD

    def key(self) -> tuple[Any, ...]:
        """What a kept child must have been started for to run this session's next turn."""
        session = self.executor.session
        root = self.workspace.root
        return (session.deployment_id, self.model, str(root) if root is not None and root.is_dir() else None)

    def start(self, history: list[dict[str, Any]]) -> pool.Kept:
        """A new child of the runtime, in a new run home, resuming `history` (or the parked run)."""
        runtime, _ = get_provider(self.model)
        homes.sweep_once()
        home = homes.build()
        try:
            proxy = ModelProxy(home.socket, *homes.model_server(self.profile.params, runtime.key_env,
                                                                runtime.base_url_env)).__enter__()
        except BaseException:
            home.remove()
            raise
        # The runtime goes on from the cost its resumed transcript records (a parked run's may hold one).
        kept = pool.Kept(Child(), home, proxy, cwd="",
                         cost=transcript.recorded_cost((self.parked or {}).get("transcript", "")))
        try:
            kept.child.open(self.options(kept, history))
        except BaseException:
            kept.close()
            raise
        return kept

    def options(self, kept: pool.Kept, history: list[dict[str, Any]]):
        from claude_agent_sdk import (ClaudeAgentOptions, HookMatcher, PermissionResultAllow, PermissionResultDeny,
                                      SdkMcpTool, create_sdk_mcp_server)

        home, child = kept.home, kept.child
        # The session's local workspace once it exists (nothing of it is read as configuration).
        root = self.workspace.root
        cwd = kept.cwd = str(root) if root is not None and root.is_dir() else str(home.scratch)
        resume = None
        if self.parked:  # the runtime's own transcript: it holds the call it deferred
            resume = self.parked["session"]
            transcript.write(_transcript_path(home, cwd, resume), self.parked["transcript"])
        elif history:  # the conversation so far, as the runtime's transcript of a session it resumes
            resume = str(uuid.uuid4())
            transcript.write(_transcript_path(home, cwd, resume),
                             transcript.as_jsonl(transcript.entries(history, resume, cwd, self.model)))
        homes.write_skills(home, self.workspace.loaded)
        env = homes.environment(home, self.workspace.loaded.runtime, self.profile.params)
        homes.write_launcher(home, cwd, homes.sandbox_mounts(self.workspace.loaded.runtime), env)
        # The agent's tools, and the workspace verbs the runtime's own tools do not stand in for.
        tools = [SdkMcpTool(name=spec.name, description=spec.description, input_schema=spec.input_schema,
                            handler=_handler(child, spec.name))
                 for spec in self.executor.specs() if spec.name not in self.builtins.stands_for()]

        async def before_call(hook_input: dict[str, Any], tool_use_id: str | None, context) -> dict[str, Any]:
            decision, reason = await child.need("permission", hook_input.get("tool_name", ""),
                                                hook_input.get("tool_input"), tool_use_id or "",
                                                in_subagent=bool(hook_input.get("agent_id")))
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision,
                                           "permissionDecisionReason": reason}}

        offered = set(self.builtins.tools)  # the same for every turn a kept child runs (one release)

        async def permit(tool: str, input: dict[str, Any], context) -> Any:
            # Every call was decided before it (before_call); a call of anything else is refused here too.
            if names.agent_tool(tool) or tool in offered:
                return PermissionResultAllow()
            return PermissionResultDeny(message=f"{tool} is not offered to this agent")

        # Under a budget the runtime stops itself once its session's running total passes what is left.
        kept.limit = None if self.room is None else kept.cost + float(self.room)
        return ClaudeAgentOptions(
            model=self.model.partition(":")[2],
            system_prompt=self.profile.system + brief(self.workspace, self.builtins.tools),
            cwd=cwd,
            cli_path=str(home.launcher),
            env=env,
            tools=self.builtins.offered(),  # of the runtime's own, those standing in for agentsite's
            agents=homes.agent_definitions(self.workspace.loaded) if "subagents" in self.natives else None,
            mcp_servers={names.SERVER: create_sdk_mcp_server(names.SERVER, tools=tools)} if tools else {},
            strict_mcp_config=True,
            setting_sources=["user"],  # the run home's only: none of the workspace's (the project's)
            hooks={"PreToolUse": [HookMatcher(matcher=None, hooks=[before_call])]},
            can_use_tool=permit,
            include_partial_messages=True,
            max_turns=self.profile.max_steps,
            max_budget_usd=kept.limit,
            resume=resume,
        )

    def follow(self, child: Child, messages: list[dict[str, Any]]):
        """Turn the runtime's messages into events until its response ends; its result message."""
        from claude_agent_sdk import ResultMessage

        result = None
        held: list[Asked] = []
        stopped_at = 0.0
        while True:
            if not self.stopping and self.interrupts.should_stop():
                self.stopping, stopped_at = True, time.monotonic()
                child.interrupt()
            try:
                item = child.inbox.get(timeout=INTERRUPT_CHECK_SECONDS)
            except queue.Empty:
                if self.stopping and time.monotonic() - stopped_at > STOP_GRACE_SECONDS:
                    return result  # the child did not end its response: closing it ends it
                continue
            if isinstance(item, Ended):
                self.steps.close(messages)
                if item.error is not None and not self.stopping:
                    raise ProviderError(f"the Claude Agent SDK runtime failed: {item.error}", code="model_error")
                return result
            if isinstance(item, Asked):
                # The runtime asks about a call while the reply is still streaming: it is answered once the
                # step has ended, so the step's events come before its calls', as on the own loop.
                held.append(item)
            elif isinstance(item.message, ResultMessage):
                result = item.message
            else:
                self.steps.take(item.message, messages)
            if held and not self.steps.streaming:
                self.steps.close(messages)
                for asked in held:
                    self.answer(asked)
                held.clear()

    def answer(self, asked: Asked) -> None:
        """Answer the runtime's question about a call, unless it withdrew it (an interrupt cancels it)."""
        if not asked.answer.set_running_or_notify_cancel():
            return
        if self.stopping:  # nothing more runs once the turn was asked to stop
            refusal = "the turn was stopped"
            asked.answer.set_result(("deny", refusal) if asked.kind == "permission" else
                                    {"content": [{"type": "text", "text": refusal}], "is_error": True})
        elif asked.kind == "permission":
            asked.answer.set_result(self.permit(asked))
        else:
            asked.answer.set_result(self.call(asked))

    def charge(self, result, kept: pool.Kept) -> None:
        """The run's usage, with the cost the SDK reports, counted and charged.

        The SDK reports the cost of the runtime's whole session so far (a kept child's earlier turns, a
        parked run's first part): this run's is what it added since `kept.cost`.
        """
        usage = _usage(result, kept.cost)
        if result.total_cost_usd is not None:
            kept.cost = float(result.total_cost_usd)
        self.usage = add_usage(self.usage, usage)
        self.usage_by_model[self.model] = add_usage(self.usage_by_model.get(self.model, zero()), usage)
        self.meter.called(self.model, usage)

    def settle(self, result, kept: pool.Kept) -> str:
        if self.stopping:
            if result is not None:  # what the runtime spent before it stopped is charged too
                self.charge(result, kept)
            raise Interrupted()
        if result is None:
            raise ProviderError("the Claude Agent SDK runtime ended without a result", code="model_error")
        self.charge(result, kept)
        if result.is_error:
            if result.subtype == "error_max_budget_usd":
                self.meter.before_call()  # the budget it stopped for, named as the own loop names it
            code = RESULT_CODES.get(result.subtype) or MESSAGE_ERRORS.get(self.steps.error, "model_error")
            detail = result.result or "; ".join(result.errors or []) or result.subtype
            raise ProviderError(f"the Claude Agent SDK runtime stopped: {detail}", code=code)
        return self.steps.last_text

    # -- the agent's tools -----------------------------------------------------------------
    def permit(self, asked: Asked) -> tuple[str, str]:
        """Decide a call before it runs: "allow", "deny" with the reason, or "defer" (it waits for approval).

        The first time, the call is stored and announced; a deferred call asked
        again when its parked turn resumes finds its row, decided.
        """
        if asked.tool in self.builtins.tools:
            return self.builtins.permit(asked.tool_use_id, asked.tool, asked.input, in_subagent=asked.in_subagent)
        name = names.agent_tool(asked.tool)
        if not name:
            return "deny", f"{asked.tool} is not offered to this agent"
        row = ToolCallRow.objects.filter(turn=self.executor.turn, call_id=asked.tool_use_id).first()
        if row is None:
            with transaction.atomic():
                [prepared] = self.executor.prepare([ToolCall(asked.tool_use_id, name, asked.input)])
                row = prepared.row
                if row.status == ToolCallRow.Status.AWAITING_APPROVAL and asked.in_subagent:
                    row.fail(SUBAGENT_CANNOT_ANSWER if row.question else SUBAGENT_CANNOT_ASK,
                             expect=(ToolCallRow.Status.AWAITING_APPROVAL,))
                announce(self.emitter, row, prepared.requested(), prepared.tool.description if prepared.tool else "",
                         prepared.tool.effect if prepared.tool else "")
            self.emitter.flush()
        if row.status == ToolCallRow.Status.AWAITING_APPROVAL:
            return "defer", "waiting for a person's " + ("answer" if row.question else "approval")
        if row.status in (ToolCallRow.Status.REQUESTED, ToolCallRow.Status.APPROVED) or (
                row.question and row.status == ToolCallRow.Status.DONE):  # a question answered: the answer
            self.allowed[name].append((asked.input, row))
            return "allow", ""
        if row.status == ToolCallRow.Status.DENIED:
            self.executor.explain_denials([row])
        self.report(row, 0.0)  # refused, invalid, or a dry run's stub: it ends here
        return "deny", tool_message(row)["content"]

    def call(self, asked: Asked) -> dict[str, Any]:
        """Run an allowed call once; what the runtime hands the model."""
        name = names.agent_tool(asked.tool)
        waiting = self.allowed.get(name)
        # The call asked about with these arguments; the runtime calls in the order it asked.
        match = next((pair for pair in waiting or () if pair[0] == asked.input), None)
        if match is None:
            return {"content": [{"type": "text", "text": f"{name} was not allowed with these arguments"}],
                    "is_error": True}
        waiting.remove(match)
        row = match[1]
        started = time.monotonic()
        if row.status == ToolCallRow.Status.DONE:  # a question's answer, given while the turn was parked
            durations = {}
        elif row.status == ToolCallRow.Status.APPROVED:
            durations = self.executor.run_approved([row])
        else:
            tool = self.executor.tools[row.tool]
            durations = self.executor.run([Prepared(ToolCall(row.call_id, row.tool, row.input), row, tool,
                                                    tool.input_model.model_validate(row.input), row.input)])
        self.report(row, durations.get(row.pk, (time.monotonic() - started) * 1000))
        answer = tool_message(row)
        return {"content": [{"type": "text", "text": answer["content"]}], "is_error": answer["isError"]}

    def end_unfinished(self) -> None:
        """Calls the runtime was allowed but never made, or never told the result of (the run broke off)."""
        for waiting in self.allowed.values():
            for _, row in waiting:
                if row.abandon("not run: the runtime did not make the call"):
                    self.report(row, 0.0)
        self.allowed.clear()
        self.builtins.end_unfinished()

    def report(self, row: ToolCallRow, duration_ms: float) -> None:
        report(self.emitter, row, duration_ms)


def _handler(child: Child, name: str):
    async def handle(arguments: dict[str, Any]) -> dict[str, Any]:
        return await child.need("call", names.PREFIX + name, arguments)
    return handle


def _read_transcript(home: homes.RunHome, cwd: str, session_id: str) -> str:
    """The runtime's own transcript of its session in this run, as it wrote it."""
    path = _transcript_path(home, cwd, session_id)
    return path.read_text() if path.is_file() else ""


def _prompt(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else str(content)


def _usage(result, cost_before: float) -> dict[str, Any]:
    """The run's counts as the runtime totals them, with the cost the SDK reports beyond `cost_before`."""
    counts = result.usage or {}
    usage: dict[str, Any] = {
        "inputTokens": int(counts.get("input_tokens") or 0),
        "outputTokens": int(counts.get("output_tokens") or 0),
        "cacheReadTokens": int(counts.get("cache_read_input_tokens") or 0),
        "cacheWriteTokens": int(counts.get("cache_creation_input_tokens") or 0),
    }
    if result.total_cost_usd is None:
        return {**usage, "costUsd": None, "unpricedCalls": 1}
    return {**usage, "costUsd": round(max(0.0, float(result.total_cost_usd) - cost_before), 11)}


def _transcript_path(home: homes.RunHome, cwd: str, session_id: str):
    """Where the runtime keeps (and resumes) the transcript of its session `session_id` working in `cwd`."""
    from claude_agent_sdk import project_key_for_directory

    return home.config / "projects" / project_key_for_directory(cwd) / f"{session_id}.jsonl"
