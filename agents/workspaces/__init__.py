"""Workspaces: where a turn's file and shell tools act.

`runtimes` (what `Agent(runtime=...)` declares and the `narrow` rule),
`filesystems` (the duck-typed protocol, tool inputs, path checks), `memoryfs`,
`unionfs`, `localfs` (a contained host directory), `shell` (the time-limited
process-group runner of a local workspace), `host_files` (the agent's file
store as a filesystem), `tools` (one `Tool` per verb). `sessions.workspaces.store`
builds and removes each session's workspace from these.
"""
