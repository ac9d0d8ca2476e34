"""`ctx.host.files`: an agent's durable file store, and `host_files_fs()` bound to it.

Files are read back through another host object (another turn, another
worker); conditional writes refuse to overwrite content that changed since
it was read; paths that could name something outside the store are refused.
"""
from __future__ import annotations

import pytest

from agents.discovery import deploy_agent_folder
from agents.workspaces.filesystems import EditArgs, GlobArgs, GrepArgs, LsArgs, ReadArgs, WorkspaceError, WriteArgs
from agents.workspaces.host_files import HostFilesWorkspace, host_files_fs
from sessions.host import FileChanged, Host, HostError, bind_filesystem
from sessions.models import HostFile
from tests.sessions.test_host_kv import new_session
from tests.sessions.test_schedules import write_agent

pytestmark = pytest.mark.django_db


def files(agent):
    return Host(session=None, agent=agent).files


def test_files_are_stored_whole_and_read_back_as_text_or_bytes(support_agent):
    store = Host(session=new_session(support_agent), agent=support_agent).files
    info = store.write("notes/plan.md", "# Plan\nship it ✓\n")
    store.write("data/blob.bin", b"\x00\xff\x10")

    again = files(support_agent)
    assert again.read("notes/plan.md") == "# Plan\nship it ✓\n"
    assert again.read_bytes("data/blob.bin") == b"\x00\xff\x10"
    assert (info.path, info.size) == ("notes/plan.md", len("# Plan\nship it ✓\n".encode()))
    assert again.stat("notes/plan.md").sha256 == info.sha256
    assert [f.path for f in again.list()] == ["data/blob.bin", "notes/plan.md"]
    assert [f.path for f in again.list("notes/")] == ["notes/plan.md"]
    assert again.exists("notes/plan.md") and not again.exists("notes")

    again.write("notes/plan.md", "v2")
    assert store.read("notes/plan.md") == "v2"
    assert HostFile.objects.filter(path="notes/plan.md").count() == 1
    with pytest.raises(HostError, match="not UTF-8 text"):
        again.read("data/blob.bin")
    assert again.delete("notes/plan.md") is True
    assert again.delete("notes/plan.md") is False
    with pytest.raises(FileNotFoundError):
        again.read("notes/plan.md")
    assert again.stat("notes/plan.md") is None


def test_each_agent_has_its_own_store(support_agent, tmp_path):
    other = deploy_agent_folder(write_agent(tmp_path / "other", {})).agent
    files(support_agent).write("shared.txt", "support's")
    assert files(other).list() == []
    with pytest.raises(FileNotFoundError):
        files(other).read("shared.txt")


def test_a_conditional_write_refuses_to_overwrite_a_change(support_agent):
    store = files(support_agent)
    first = store.write("todo.txt", "one")
    store.write("todo.txt", "two", if_sha256=first.sha256)
    with pytest.raises(FileChanged, match="changed"):
        store.write("todo.txt", "three", if_sha256=first.sha256)
    assert store.read("todo.txt") == "two"
    with pytest.raises(FileChanged):
        store.write("new.txt", "x", if_sha256=first.sha256)
    assert not store.exists("new.txt")


@pytest.mark.parametrize("path, says", [
    ("", "must not be empty"),
    ("/etc/passwd", "absolute"),
    ("../secrets", "'..'"),
    ("notes/../../x", "'..'"),
    ("notes//x", "empty"),
    ("./x", "'.'"),
    ("notes/", "empty"),
    ("a\\b", "backslash"),
    ("a\x00b", "NUL"),
    ("a\nb", "control character"),
    ("\udc80", "lone surrogate"),
    ("x" * 300, "longer than 255 bytes"),
    ("/".join(["abcdefghij"] * 100), "at most 1024 bytes"),
    (None, "must be a string"),
])
def test_paths_that_are_not_plain_relative_paths_are_refused(support_agent, path, says):
    with pytest.raises(HostError, match=says):
        files(support_agent).write(path, "x")
    assert not HostFile.objects.exists()


def test_content_over_the_limit_or_of_the_wrong_kind_is_refused(support_agent, settings):
    settings.AGENTSITE_HOST_FILE_MAX_BYTES = 8
    store = files(support_agent)
    store.write("ok.txt", "12345678")
    with pytest.raises(HostError, match="at most 8 bytes; this one has 9"):
        store.write("big.txt", "123456789")
    with pytest.raises(HostError, match="str or bytes"):
        store.write("dict.txt", {"a": 1})
    with pytest.raises(HostError, match="lone surrogate"):
        store.write("bad.txt", "\ud800")
    assert [f.path for f in store.list()] == ["ok.txt"]


def test_host_files_fs_works_once_the_session_binds_it(support_agent):
    declared = host_files_fs("workspace")
    with pytest.raises(WorkspaceError, match="only in a session"):
        declared.read(ReadArgs(path="/x"))
    host = Host(session=new_session(support_agent), agent=support_agent)

    fs = bind_filesystem(declared, host)
    assert isinstance(fs, HostFilesWorkspace)
    fs.write(WriteArgs(path="/notes/plan.md", content="step one\nstep two\n"))
    fs.edit(EditArgs(path="/notes/plan.md", old_text="step two", new_text="step 2"))

    assert files(support_agent).read("workspace/notes/plan.md") == "step one\nstep 2\n", "stored under the root"
    assert [e["name"] for e in fs.ls(LsArgs(path="/"))["entries"]] == ["notes"]
    assert fs.glob(GlobArgs(pattern="**/*.md"))["files"] == ["/notes/plan.md"]
    assert "step 2" in str(fs.grep(GrepArgs(pattern="step 2")))

    reader = bind_filesystem(host_files_fs("workspace", read_only=True), host)
    assert not hasattr(reader, "write")
    assert "step 2" in reader.read(ReadArgs(path="/notes/plan.md"))
    assert bind_filesystem(fs, host) is fs, "anything without bind_host is used as it is"


def test_an_edit_loses_no_concurrent_change(support_agent):
    host = Host(session=None, agent=support_agent)
    fs = bind_filesystem(host_files_fs(), host)
    fs.write(WriteArgs(path="/list.txt", content="a\nb\n"))
    store = files(support_agent)
    original_read = store.read_bytes

    class Racing:
        """The store as the editor sees it: someone else writes right after the editor reads."""

        def __getattr__(self, name):
            return getattr(store, name)

        def read_bytes(self, path):
            data = original_read(path)
            store.write(path, "a\nb\nc\n")
            return data

    fs.inner.store = Racing()
    with pytest.raises(WorkspaceError, match="changed"):  # what the model sees: read and edit again
        fs.edit(EditArgs(path="/list.txt", old_text="b", new_text="B"))
    assert store.read("list.txt") == "a\nb\nc\n"


@pytest.mark.django_db(transaction=True)
def test_a_turn_writes_through_a_mounted_host_store_that_a_later_session_reads(local, sync_turns, tmp_path):
    """virtual_runtime(union_fs({"/host": host_files_fs(), ...})): the model's workspace tools reach the agent's
    durable store, so what one session writes there the next session (another process, later) reads."""
    import json

    from sessions.models import Event

    root = write_agent(tmp_path / "keeper", {"agent/agent.py": """
        from agents.sdk import Agent, host_files_fs, memory_fs, union_fs, virtual_runtime
        agent = Agent(model="scripted:echo", runtime=virtual_runtime(union_fs({
            "/host": host_files_fs("shared"), "/scratch": memory_fs({})})))
    """})
    agent = deploy_agent_folder(root).agent

    def turn(message: str) -> list[dict]:
        response = local.post("/keeper/v1/session", json.dumps({"message": message}), content_type="application/json")
        assert response.status_code == 201, response.content
        return list(Event.objects.filter(session_id=response.json()["sessionId"], type="action.result")
                    .order_by("index").values_list("data", flat=True))

    turn('/call write {"path": "/host/notes/plan.md", "content": "ship friday\\n"}')
    [read] = turn('/call read {"path": "/host/notes/plan.md"}')

    assert files(agent).read("shared/notes/plan.md") == "ship friday\n"
    assert "ship friday" in read["output"]
