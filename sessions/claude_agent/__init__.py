"""Turns on the official Claude Agent SDK (`claude-agent:<model>` sessions).

`leg.ClaudeAgentLeg` takes the place of the own loop (sessions.turn.runner)
for such a session's turns: the same events, the same ToolCall rows and the
same stored conversation, produced by the official runtime's child process.
`bridge` runs the SDK's event loop beside the turn's thread, `home` builds
the folder each run reads its configuration from, and `transcript` writes
the session's conversation as the runtime's own transcript to resume from.
The SDK is imported only here, and only when such a turn runs.
"""
