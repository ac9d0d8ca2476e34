"""Containment of a local workspace: every hostile path, symbolic link and hard link, against every verb.

The workspace is `<tmp>/ws`; beside it are `<tmp>/ws-evil` (a sibling whose
name starts with the workspace's) and `<tmp>/outside`, each holding a secret.
Every attempt must be refused with a WorkspaceError (what the model sees),
and afterwards nothing outside the workspace may have been read or changed.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.workspaces.filesystems import (
    DeleteArgs,
    EditArgs,
    GlobArgs,
    GrepArgs,
    LsArgs,
    ReadArgs,
    ShellArgs,
    WorkspaceError,
    WriteArgs,
)
from agents.workspaces.shell import LocalShellFS

SECRET = "TOPSECRET-7f3a"


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    ws, evil, outside = tmp_path / "ws", tmp_path / "ws-evil", tmp_path / "outside"
    for folder in (ws, evil, outside):
        folder.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET} outside\n")
    (evil / "secret.txt").write_text(f"{SECRET} sibling\n")
    (ws / "notes.txt").write_text("mine\n")
    (ws / "dir").mkdir()
    # Links planted in the workspace, as a tool or a shell command could make them.
    os.symlink(outside, ws / "link-out")
    os.symlink(outside / "secret.txt", ws / "file-link")
    os.symlink("../ws-evil", ws / "evil-link")
    os.symlink("../../outside", ws / "dir" / "up-link")
    # A hard link is a real entry of the workspace, yet its content is the outside file's.
    os.link(outside / "secret.txt", ws / "hard-link")
    return {"ws": ws, "evil": evil, "outside": outside, "tmp": tmp_path}


def snapshot(tmp: Path) -> dict[str, tuple[bytes, int]]:
    """Every file outside the workspace with its bytes and modification time."""
    found = {}
    for path in sorted(tmp.rglob("*")):
        if path.is_file() and not path.is_symlink() and "ws" not in path.relative_to(tmp).parts[:1]:
            found[str(path)] = (path.read_bytes(), path.stat().st_mtime_ns)
    return found


def hostile_paths(tree: dict[str, Path]) -> list[str]:
    return [
        "../outside/secret.txt",                       # climbing out
        "dir/../../outside/secret.txt",                # climbing out from below
        "../ws-evil/secret.txt",                       # the sibling with the same prefix
        str(tree["outside"] / "secret.txt"),           # an absolute path
        "/etc/passwd",
        "%2e%2e/outside/secret.txt",                   # percent-encoded dots
        "..%2Foutside%2Fsecret.txt",                   # a percent-encoded slash
        "notes.txt\x00../../outside/secret.txt",       # a NUL byte
        "..\\outside\\secret.txt",                     # backslashes
        "link-out/secret.txt",                         # through a link to a directory outside
        "link-out",
        "file-link",                                   # a link to a file outside
        "evil-link/secret.txt",                        # a link to the sibling
        "dir/up-link/secret.txt",                      # a relative link climbing out
        "hard-link",                                   # a hard link to a file outside
    ]


VERB_CALLS = {
    "read": lambda fs, p: fs.read(ReadArgs(path=p)),
    "write": lambda fs, p: fs.write(WriteArgs(path=p, content="pwned")),
    "edit": lambda fs, p: fs.edit(EditArgs(path=p, old_text=SECRET, new_text="pwned")),
    "delete": lambda fs, p: fs.delete(DeleteArgs(path=p)),
    "ls": lambda fs, p: fs.ls(LsArgs(path=p)),
    "glob": lambda fs, p: fs.glob(GlobArgs(pattern="**", path=p)),
    "grep": lambda fs, p: fs.grep(GrepArgs(pattern=SECRET, path=p)),
    "shell": lambda fs, p: fs.shell(ShellArgs(command="cat secret.txt; echo pwned > secret.txt", cwd=p)),
}


@pytest.mark.parametrize("verb", sorted(VERB_CALLS))
def test_every_hostile_path_is_refused_by_every_verb(tree, verb):
    fs = LocalShellFS(tree["ws"], timeout=5)
    before = snapshot(tree["tmp"])

    for path in hostile_paths(tree):
        with pytest.raises(WorkspaceError) as refused:
            VERB_CALLS[verb](fs, path)
        assert SECRET not in str(refused.value), (verb, path)
        assert str(tree["tmp"]) not in str(refused.value) or path.startswith(str(tree["tmp"])), (
            "a refusal names workspace paths, never the host's", verb, path)

    assert snapshot(tree["tmp"]) == before, f"{verb} changed something outside the workspace"
    assert (tree["ws"] / "link-out").is_symlink() and (tree["ws"] / "file-link").is_symlink()


def test_hostile_glob_and_grep_patterns_are_refused(tree):
    fs = LocalShellFS(tree["ws"])

    for pattern in ("../*", "../outside/*", "dir/../../*", "a\x00b"):
        with pytest.raises(WorkspaceError):
            fs.glob(GlobArgs(pattern=pattern))
        with pytest.raises(WorkspaceError):
            fs.grep(GrepArgs(pattern="x", glob=pattern))


def test_searching_the_whole_workspace_never_follows_a_link_out(tree):
    fs = LocalShellFS(tree["ws"])

    everything = fs.glob(GlobArgs(pattern="**"))["files"]
    assert everything == ["notes.txt"]
    assert fs.grep(GrepArgs(pattern=SECRET)) == {"matches": [], "truncated": False}
    assert fs.grep(GrepArgs(pattern=SECRET, output_mode="files")) == {"files": [], "truncated": False}
    listing = {e["name"]: e["type"] for e in fs.ls(LsArgs(path="."))["entries"]}
    assert listing == {"dir": "dir", "evil-link": "symlink", "file-link": "symlink", "hard-link": "hardlink",
                       "link-out": "symlink", "notes.txt": "file"}


def test_a_link_made_by_shell_is_refused_by_the_file_verbs(tree):
    fs = LocalShellFS(tree["ws"])
    before = snapshot(tree["tmp"])

    made = fs.shell(ShellArgs(command=f"ln -s {tree['outside']} made && ln -s {tree['outside']}/secret.txt made-file"))
    assert made["exitCode"] == 0

    for path in ("made/secret.txt", "made-file", "made"):
        for verb in ("read", "write", "edit", "delete", "ls", "glob", "grep", "shell"):
            with pytest.raises(WorkspaceError):
                VERB_CALLS[verb](fs, path)
    assert snapshot(tree["tmp"]) == before


def test_a_path_inside_through_an_inward_link_still_works(tree):
    fs = LocalShellFS(tree["ws"])
    os.symlink("dir", tree["ws"] / "alias")

    fs.write(WriteArgs(path="alias/new.txt", content="hi"))

    assert (tree["ws"] / "dir" / "new.txt").read_text() == "hi"
    assert fs.read(ReadArgs(path="alias/new.txt")) == "hi"


def test_the_workspace_root_itself_cannot_be_deleted_or_written(tree):
    fs = LocalShellFS(tree["ws"])

    for path in (".", "", "dir/.."):
        with pytest.raises(WorkspaceError):
            fs.delete(DeleteArgs(path=path))
        with pytest.raises(WorkspaceError):
            fs.write(WriteArgs(path=path, content="x"))
    assert (tree["ws"] / "notes.txt").read_text() == "mine\n"


def test_deleting_a_link_out_is_refused_and_leaves_the_target(tree):
    fs = LocalShellFS(tree["ws"])

    with pytest.raises(WorkspaceError):
        fs.delete(DeleteArgs(path="link-out"))

    assert (tree["outside"] / "secret.txt").exists()
    assert (tree["ws"] / "link-out").is_symlink()


def test_the_verbs_work_inside(tree):
    fs = LocalShellFS(tree["ws"])

    assert fs.write(WriteArgs(path="a/b/c.txt", content="one\ntwo\nthree\n")) == {"path": "a/b/c.txt", "bytes": 14}
    assert fs.read(ReadArgs(path="a/b/c.txt", offset=2, limit=1)) == "two\n"
    assert fs.edit(EditArgs(path="a/b/c.txt", old_text="two", new_text="2")) == {"path": "a/b/c.txt",
                                                                                  "replacements": 1}
    assert fs.glob(GlobArgs(pattern="**/*.txt"))["files"] == ["a/b/c.txt", "notes.txt"]
    assert fs.glob(GlobArgs(pattern="*.txt", path="a/b"))["files"] == ["a/b/c.txt"]
    assert fs.grep(GrepArgs(pattern="^2$"))["matches"] == [{"path": "a/b/c.txt", "line": 2, "text": "2"}]
    assert fs.grep(GrepArgs(pattern="e", output_mode="count"))["counts"] == [{"path": "notes.txt", "count": 1},
                                                                           {"path": "a/b/c.txt", "count": 2}]
    shell = fs.shell(ShellArgs(command="pwd; cat c.txt", cwd="a/b"))
    assert shell["exitCode"] == 0
    assert shell["stdout"] == f"{os.path.realpath(tree['ws'])}/a/b\none\n2\nthree\n"
    assert fs.delete(DeleteArgs(path="a")) == {"path": "a", "deleted": True}
    assert not (tree["ws"] / "a").exists()


# -- hard links: a real entry of the workspace whose content is a file outside ------------------

def refused_as_hard_link(call) -> str:
    with pytest.raises(WorkspaceError) as refused:
        call()
    message = str(refused.value)
    assert "hard-link is a hard link" in message and SECRET not in message, message
    return message


def test_reading_a_hard_link_to_a_file_outside_is_refused(tree):
    fs = LocalShellFS(tree["ws"])

    refused_as_hard_link(lambda: fs.read(ReadArgs(path="hard-link")))


def test_writing_a_hard_link_to_a_file_outside_is_refused_and_the_file_keeps_its_content(tree):
    fs = LocalShellFS(tree["ws"])
    before = snapshot(tree["tmp"])

    refused_as_hard_link(lambda: fs.write(WriteArgs(path="hard-link", content="pwned")))

    assert (tree["outside"] / "secret.txt").read_text() == f"{SECRET} outside\n"
    assert snapshot(tree["tmp"]) == before


def test_editing_a_hard_link_to_a_file_outside_is_refused(tree):
    fs = LocalShellFS(tree["ws"])
    before = snapshot(tree["tmp"])

    refused_as_hard_link(lambda: fs.edit(EditArgs(path="hard-link", old_text="outside", new_text="pwned")))

    assert snapshot(tree["tmp"]) == before


def test_deleting_a_hard_link_is_refused_as_every_verb_refuses_it(tree):
    fs = LocalShellFS(tree["ws"])

    refused_as_hard_link(lambda: fs.delete(DeleteArgs(path="hard-link")))

    assert (tree["ws"] / "hard-link").exists() and (tree["outside"] / "secret.txt").exists()


def test_ls_shows_a_hard_link_as_such_without_the_outside_files_size(tree):
    fs = LocalShellFS(tree["ws"])

    entries = {e["name"]: e for e in fs.ls(LsArgs(path="."))["entries"]}

    assert entries["hard-link"] == {"name": "hard-link", "type": "hardlink"}
    assert entries["notes.txt"] == {"name": "notes.txt", "type": "file", "size": 5}
    with pytest.raises(WorkspaceError):
        fs.ls(LsArgs(path="hard-link"))


def test_glob_leaves_a_hard_link_out(tree):
    fs = LocalShellFS(tree["ws"])
    os.link(tree["outside"] / "secret.txt", tree["ws"] / "dir" / "deep.txt")

    assert fs.glob(GlobArgs(pattern="**"))["files"] == ["notes.txt"]
    assert fs.glob(GlobArgs(pattern="**/*.txt"))["files"] == ["notes.txt"]
    assert fs.glob(GlobArgs(pattern="*", path="dir"))["files"] == []


def test_grep_skips_a_hard_link_and_refuses_one_named_directly(tree):
    fs = LocalShellFS(tree["ws"])
    os.link(tree["outside"] / "secret.txt", tree["ws"] / "dir" / "deep.txt")

    assert fs.grep(GrepArgs(pattern="outside")) == {"matches": [], "truncated": False}
    assert fs.grep(GrepArgs(pattern="outside", path="dir", output_mode="files")) == {"files": [], "truncated": False}
    refused_as_hard_link(lambda: fs.grep(GrepArgs(pattern="outside", path="hard-link")))


def test_a_file_with_a_second_name_inside_the_workspace_is_refused_too(tree):
    """The link count says a file has other names, not where they are: both names are refused."""
    fs = LocalShellFS(tree["ws"])
    made = fs.shell(ShellArgs(command="ln notes.txt dir/twin.txt"))
    assert made["exitCode"] == 0

    for path in ("notes.txt", "dir/twin.txt"):
        with pytest.raises(WorkspaceError, match="is a hard link"):
            fs.read(ReadArgs(path=path))
    # A directory is deleted whole, hard links inside or not: unlinking one name leaves the other.
    assert fs.delete(DeleteArgs(path="dir")) == {"path": "dir", "deleted": True}
    assert fs.read(ReadArgs(path="notes.txt")) == "mine\n"


def test_writing_to_a_fifo_is_refused_instead_of_waiting_for_a_reader(tree):
    fs = LocalShellFS(tree["ws"])
    os.mkfifo(tree["ws"] / "pipe")

    with pytest.raises(WorkspaceError, match="pipe is not a regular file"):
        fs.write(WriteArgs(path="pipe", content="x"))
