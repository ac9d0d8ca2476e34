"""`host_files_fs()` as a filesystem: read, ls, glob, grep, write, edit, delete over a store.

The store here is a dict with the store's interface (the server binds the
filesystem to `ctx.host.files`; tests/sessions/test_host_files.py does that),
so what is checked is the filesystem's own behaviour: folders from path
prefixes, glob and grep semantics, refusals, and that nothing outside the
mount's root can be named.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pytest

from agents.workspaces.filesystems import (DeleteArgs, EditArgs, GlobArgs, GrepArgs, LsArgs, ReadArgs, WorkspaceError, WriteArgs,
                                           methods_of)
from agents.workspaces.host_files import Entry, HostFilesFilesystem, Match, glob_regex, host_files_fs
from agents.workspaces.memoryfs import memory_fs
from agents.workspaces.runtimes import SessionContext
from agents.workspaces.unionfs import union_fs


@dataclass
class Stored:
    path: str
    size: int


class DictStore:
    def __init__(self, files: dict[str, bytes | str]):
        self.files = {k: v.encode() if isinstance(v, str) else v for k, v in files.items()}

    def read_bytes(self, path: str) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    def exists(self, path: str) -> bool:
        return path in self.files

    def write(self, path: str, content: str | bytes, *, if_sha256: str | None = None) -> None:
        if if_sha256 is not None and hashlib.sha256(self.files.get(path, b"")).hexdigest() != if_sha256:
            raise ValueError("changed")
        self.files[path] = content.encode() if isinstance(content, str) else content

    def delete(self, path: str) -> bool:
        return self.files.pop(path, None) is not None

    def list(self, prefix: str = "") -> list[Stored]:
        return [Stored(p, len(c)) for p, c in sorted(self.files.items()) if p.startswith(prefix)]


class FakeHost:
    def __init__(self, store: DictStore):
        self.files = store


TREE = {
    "README.md": "# Notes\n",
    "notes/plan.md": "ship on friday\nthen rest\n",
    "notes/2026/q1.md": "Q1: ship the store\n",
    "notes/2026/data.bin": b"\xff\xfe ship \x00",
    "outside/secret.txt": "not mounted",
}


def mounted(root: str = "", **options) -> HostFilesFilesystem:
    """The store's own filesystem under a bound mount (the workspace protocol wraps it: see the end)."""
    return host_files_fs(root, **options).bind_host(FakeHost(DictStore(TREE))).inner


def test_ls_lists_a_folders_children_with_folders_from_path_prefixes():
    fs = mounted()
    assert fs.ls("/") == [
        Entry("README.md", "/README.md", "file", 8), Entry("notes", "/notes", "dir"),
        Entry("outside", "/outside", "dir")]
    assert [(e.name, e.kind) for e in fs.ls("notes")] == [("2026", "dir"), ("plan.md", "file")]
    assert fs.ls("/notes/plan.md") == [Entry("plan.md", "/notes/plan.md", "file", 25)]
    with pytest.raises(FileNotFoundError):
        fs.ls("/nothing")


def test_a_mount_of_a_folder_sees_only_that_folder():
    fs = mounted("notes")
    assert [e.name for e in fs.ls("/")] == ["2026", "plan.md"]
    assert fs.read("/plan.md") == "ship on friday\nthen rest\n"
    assert fs.glob("**") == ["/2026/data.bin", "/2026/q1.md", "/plan.md"]
    assert all(not m.path.startswith("/outside") for m in fs.grep("."))
    with pytest.raises(FileNotFoundError):
        fs.read("/outside/secret.txt")
    for escape in ("../outside/secret.txt", "/2026/../../outside/secret.txt"):
        with pytest.raises(ValueError, match=r"'\.\.'"):
            fs.read(escape)
    with pytest.raises(ValueError):
        fs.glob("../**")


@pytest.mark.parametrize("pattern, found", [
    ("*.md", ["/README.md"]),
    ("/notes/*.md", ["/notes/plan.md"]),
    ("notes/**/*.md", ["/notes/2026/q1.md", "/notes/plan.md"]),
    ("**/*.md", ["/README.md", "/notes/2026/q1.md", "/notes/plan.md"]),
    ("notes/**", ["/notes/2026/data.bin", "/notes/2026/q1.md", "/notes/plan.md"]),
    ("notes/2026/q?.md", ["/notes/2026/q1.md"]),
    ("notes/2026/[a-d]*", ["/notes/2026/data.bin"]),
    ("notes/2026/[!a-d]*", ["/notes/2026/q1.md"]),
    ("*", ["/README.md"]),
    ("notes/plan.md", ["/notes/plan.md"]),
    ("no-such/*", []),
])
def test_glob_keeps_star_within_a_folder_and_lets_double_star_span_folders(pattern, found):
    assert mounted().glob(pattern) == found


def test_glob_patterns_are_globs_not_regular_expressions():
    assert glob_regex("a.b").match("a.b") and not glob_regex("a.b").match("axb")
    assert glob_regex("[]x]").match("]") and glob_regex("(x)+").match("(x)+")


def test_grep_finds_lines_in_text_files_under_a_path():
    fs = mounted()
    assert fs.grep("ship") == [Match("/notes/2026/q1.md", 1, "Q1: ship the store"),
                               Match("/notes/plan.md", 1, "ship on friday")], "binary files are skipped"
    assert fs.grep("^then", "/notes/plan.md") == [Match("/notes/plan.md", 2, "then rest")]
    assert len(fs.grep(".", limit=2)) == 2
    with pytest.raises(ValueError, match="not a regular expression"):
        fs.grep("(unclosed")
    with pytest.raises(FileNotFoundError):
        fs.grep("x", "/nothing")


def test_read_refuses_folders_missing_files_and_binary_content():
    fs = mounted()
    with pytest.raises(IsADirectoryError):
        fs.read("/notes")
    with pytest.raises(IsADirectoryError):
        fs.read("/")
    with pytest.raises(FileNotFoundError):
        fs.read("/notes/none.md")
    with pytest.raises(ValueError, match="not UTF-8"):
        fs.read("/notes/2026/data.bin")


def test_write_edit_and_delete_change_files_and_keep_files_and_folders_apart():
    fs = mounted()
    fs.write("/new/deep/file.txt", "hello")
    assert fs.read("new/deep/file.txt") == "hello"
    with pytest.raises(IsADirectoryError):
        fs.write("/new", "x")
    with pytest.raises(NotADirectoryError):
        fs.write("/README.md/inside.txt", "x")
    with pytest.raises(IsADirectoryError):
        fs.write("/", "x")

    fs.edit("/notes/plan.md", "friday", "monday")
    assert fs.read("/notes/plan.md") == "ship on monday\nthen rest\n"
    fs.write("/twice.txt", "a a")
    with pytest.raises(ValueError, match="found 2 times"):
        fs.edit("/twice.txt", "a", "b")
    with pytest.raises(ValueError, match="found 0 times"):
        fs.edit("/twice.txt", "zzz", "b")
    with pytest.raises(ValueError, match="must not be empty"):
        fs.edit("/twice.txt", "", "b")
    with pytest.raises(FileNotFoundError):
        fs.edit("/missing.txt", "a", "b")

    fs.delete("/twice.txt")
    with pytest.raises(FileNotFoundError):
        fs.read("/twice.txt")
    with pytest.raises(FileNotFoundError):
        fs.delete("/twice.txt")
    with pytest.raises(IsADirectoryError):
        fs.delete("/notes")


def test_a_read_only_mount_offers_no_write_edit_or_delete():
    verbs = ("read", "ls", "glob", "grep", "write", "edit", "delete")
    bound = host_files_fs(read_only=True).bind_host(FakeHost(DictStore(TREE)))
    assert [verb for verb in verbs if hasattr(bound, verb)] == ["read", "ls", "glob", "grep"]
    assert methods_of(host_files_fs(read_only=True)) == {"read", "ls", "glob", "grep"}  # as discovery sees it
    assert methods_of(host_files_fs()) == set(verbs)


def test_bound_in_a_session_it_speaks_the_workspace_protocol():
    """What the workspace tools call: their arguments in, what the model sees out, refusals as WorkspaceError."""
    store = DictStore(TREE)
    ctx = SessionContext(session_id="ses_1", agent="a", host=FakeHost(store))
    fs = union_fs({"/host": host_files_fs("notes"), "/scratch": memory_fs({})}).for_session(ctx)

    assert fs.read(ReadArgs(path="/host/plan.md")).splitlines()[0].endswith("ship on friday")
    assert fs.ls(LsArgs(path="/host"))["entries"] == [{"name": "2026", "type": "dir"},
                                                      {"name": "plan.md", "type": "file", "size": 25}]
    assert fs.glob(GlobArgs(pattern="**/*.md", path="/host"))["files"] == ["/host/2026/q1.md", "/host/plan.md"]
    assert "ship" in str(fs.grep(GrepArgs(pattern="ship", path="/host")))
    fs.write(WriteArgs(path="/host/todo.md", content="one\ntwo\n"))
    fs.edit(EditArgs(path="/host/todo.md", old_text="two", new_text="three"))
    assert store.files["notes/todo.md"] == b"one\nthree\n"
    fs.delete(DeleteArgs(path="/host/todo.md"))
    assert "notes/todo.md" not in store.files
    with pytest.raises(WorkspaceError, match="no file"):
        fs.read(ReadArgs(path="/host/missing.md"))
    with pytest.raises(WorkspaceError, match=r"\.\."):
        fs.read(ReadArgs(path="/host/../outside/secret.txt"))
    with pytest.raises(WorkspaceError, match="only in a session"):
        host_files_fs().read(ReadArgs(path="/x"))


@pytest.mark.parametrize("root", ["../x", "a/../b", 3, "a\x00"])
def test_a_root_outside_the_store_is_refused_when_declared(root):
    with pytest.raises(ValueError, match="root"):
        host_files_fs(root)


def test_the_sdk_offers_it_to_agent_folders():
    from agents import sdk

    assert sdk.host_files_fs is host_files_fs
