"""The workspace tools: one per filesystem verb, offered when the workspace has the verb.

Each is an ordinary `Tool` (so calls go through the same ToolCall rows,
approvals and dry runs as server tools); its function calls the session's
workspace. Effects: read, ls, glob and grep read; write, edit, delete and
shell write (a dry-run session stubs them).
"""
from __future__ import annotations

from typing import Any, Iterable

from agents.definitions import Tool
from agents.workspaces.filesystems import ARGS, VERBS, WRITE_VERBS, WorkspaceError

DESCRIPTIONS = {
    "read": "Read a text file of the workspace (optionally a range of lines).",
    "ls": "List a directory of the workspace: names, kinds (file, dir, symlink, hardlink) and file sizes.",
    "glob": "Find files of the workspace whose path matches a glob pattern (`**/*.py`).",
    "grep": "Search the workspace's files for a regular expression: matching lines, files, or counts.",
    "write": "Create a file of the workspace, or replace its whole content.",
    "edit": "Change an existing file of the workspace by replacing an exact piece of its text.",
    "delete": "Delete a file or a directory (with its content) of the workspace.",
    "shell": "Run a /bin/sh command in the workspace directory; returns its exit code, stdout and stderr.",
}


def workspace_tool(verb: str, fs: Any = None, *, needs_approval: bool = False) -> Tool:
    """The tool for `verb`, bound to the filesystem `fs` (None: a description only, as in /info)."""

    def call(input, ctx) -> Any:
        if fs is None:
            raise WorkspaceError("this workspace is built per session: call the tool within a session")
        method = getattr(fs, verb)
        if verb == "shell":
            return method(input, should_stop=ctx.should_stop)
        return method(input)

    call.__name__ = verb
    return Tool(description=DESCRIPTIONS[verb], input_model=ARGS[verb], function=call,
                effect="write" if verb in WRITE_VERBS else "read", needs_approval=needs_approval)


def workspace_tools(verbs: Iterable[str], fs: Any = None, *, needs_approval: Iterable[str] = ()) -> dict[str, Tool]:
    gated = set(needs_approval)
    return {verb: workspace_tool(verb, fs, needs_approval=verb in gated) for verb in VERBS if verb in set(verbs)}
