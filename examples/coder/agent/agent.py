from agents.sdk import Agent, local_runtime

# Runs on the official Claude Agent SDK's runtime (pip install -r requirements-claude-agent.txt),
# which calls Anthropic's Messages API: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for a compatible
# server). Its own Read, Write, Edit and Bash tools work in the session's workspace, inside the sandbox;
# every command asks a person first. A session may also start on the offline scripted model, to try
# the pages without a key; add "anthropic:claude-sonnet-4-5" to hand sessions over to agentsite's loop.
agent = Agent(
    name="Coder",
    description="Writes and fixes small programs in a workspace of its own, with Claude Code's own tools.",
    models=["claude-agent:claude-sonnet-4-5", "scripted:echo"],
    runtime=local_runtime(shell_timeout=60, needs_approval=["shell"]),
)
