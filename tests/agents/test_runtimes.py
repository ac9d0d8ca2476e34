"""Runtimes and filesystems: which workspace tools each combination offers, how
`Agent(tools=...)` narrows them (and the discovery errors when it cannot), and
how union_fs routes paths by the longest prefix."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agents.discovery import AgentFolderError, load_agent_folder
from agents.workspaces.filesystems import (
    DeleteArgs,
    EditArgs,
    GlobArgs,
    GrepArgs,
    LsArgs,
    ReadArgs,
    WorkspaceError,
    WriteArgs,
    methods_of,
)
from agents.workspaces.memoryfs import memory_fs, skills_fs
from agents.workspaces.runtimes import SessionContext, narrow
from agents.workspaces.unionfs import union_fs

ALL = ["read", "ls", "glob", "grep", "write", "edit", "delete", "shell"]
FILES_ONLY = ALL[:-1]
READ_ONLY = ["read", "ls", "glob", "grep"]

WRITE_ONLY_FS = '''
class WriteOnly:
    """A filesystem that can only write (and read back)."""
    def __init__(self):
        self.files = {}
    def read(self, args):
        return self.files[args.path]
    def write(self, args):
        self.files[args.path] = args.content
        return {"path": args.path}
'''


def make_agent(tmp_path: Path, agent_py: str, files: dict[str, str] | None = None) -> Path:
    root = tmp_path / "agent-under-test"
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You help.\n")
    (root / "agent" / "agent.py").write_text(textwrap.dedent(agent_py))
    for rel, content in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return root


def offered(tmp_path: Path, agent_py: str, files: dict[str, str] | None = None) -> list[str] | None:
    return load_agent_folder(make_agent(tmp_path, agent_py, files)).manifest()["runtime"]["workspaceTools"]


def problems(tmp_path: Path, agent_py: str, files: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(AgentFolderError) as raised:
        load_agent_folder(make_agent(tmp_path, agent_py, files))
    return [str(p) for p in raised.value.problems]


HEAD = "from agents.sdk import Agent, local_runtime, virtual_runtime, memory_fs, union_fs, skills_fs\n"


# -- which tools each runtime offers ---------------------------------------------------------

@pytest.mark.parametrize("declaration, expected", [
    ("Agent()", ALL),                                                          # the default: local_runtime()
    ("Agent(runtime=local_runtime())", ALL),
    ("Agent(runtime=local_runtime(shell=False))", FILES_ONLY),
    ("Agent(runtime=virtual_runtime())", []),                                  # empty: root /, no methods
    ("Agent(runtime=virtual_runtime(memory_fs({'/a.txt': 'hi'})))", FILES_ONLY),
    ("Agent(runtime=virtual_runtime(memory_fs({'/a.txt': 'hi'}, writable=False)))", READ_ONLY),
    ("Agent(runtime=virtual_runtime(skills_fs()))", READ_ONLY),
    ("Agent(runtime=virtual_runtime(union_fs({'/docs': memory_fs(writable=False), '/skills': skills_fs()})))",
     READ_ONLY),
    ("Agent(runtime=virtual_runtime(union_fs({'/docs': memory_fs(writable=False), '/scratch': memory_fs()})))",
     FILES_ONLY),
    ("Agent(runtime=virtual_runtime(lambda ctx: memory_fs()))", None),        # a factory decides per session
])
def test_each_runtime_offers_the_verbs_its_workspace_implements(tmp_path, declaration, expected):
    assert offered(tmp_path, HEAD + f"agent = {declaration}\n") == expected


@pytest.mark.parametrize("declaration, expected", [
    ("Agent(tools=['read', 'ls'])", ["read", "ls"]),
    ("Agent(tools=[])", []),
    ("Agent(tools=['shell'])", ["shell"]),
    ("Agent(tools=['edit'])", ["write", "edit"]),                              # the editing envelope
    ("Agent(runtime=virtual_runtime(memory_fs()), tools=['grep', 'read'])", ["read", "grep"]),
    ("Agent(runtime=virtual_runtime(WriteOnly()), tools=['edit'])", ["write"]),  # satisfied by write alone
    ("Agent(runtime=virtual_runtime(WriteOnly()))", ["read", "write"]),
])
def test_tools_only_narrow_the_workspace(tmp_path, declaration, expected):
    assert offered(tmp_path, HEAD + WRITE_ONLY_FS + f"agent = {declaration}\n") == expected


@pytest.mark.parametrize("declaration, names", [
    ("Agent(runtime=virtual_runtime(), tools=['read'])", ["'read'"]),
    ("Agent(runtime=virtual_runtime(memory_fs(writable=False)), tools=['read', 'grep', 'write'])", ["'write'"]),
    ("Agent(runtime=virtual_runtime(memory_fs()), tools=['shell'])", ["'shell'"]),
    ("Agent(runtime=local_runtime(shell=False), tools=['shell'])", ["'shell'"]),
    ("Agent(runtime=virtual_runtime(memory_fs(writable=False)), tools=['edit'])", ["'edit'", "write or edit"]),
])
def test_naming_a_tool_the_workspace_lacks_is_a_discovery_error(tmp_path, declaration, names):
    [problem] = problems(tmp_path, HEAD + f"agent = {declaration}\n")

    assert problem.startswith("agent/agent.py: tools names ")
    for name in names:
        assert name in problem
    assert "remove it from tools" in problem


def test_tools_may_name_only_workspace_tools(tmp_path):
    [problem] = problems(tmp_path, HEAD + "agent = Agent(tools=['read', 'web_search'])\n")

    assert "agent/agent.py" in problem and "'web_search'" in problem and "not a workspace tool" in problem


def test_a_runtime_that_is_not_one_is_refused(tmp_path):
    [problem] = problems(tmp_path, HEAD + "agent = Agent(runtime='cloud')\n")

    assert problem == ("agent/agent.py: runtime must be local_runtime(...) or virtual_runtime(...) "
                       "(from agents.sdk), not 'cloud'")


def test_a_server_tool_named_like_an_offered_workspace_tool_is_refused(tmp_path):
    tool = ("from pydantic import BaseModel\nfrom agents.sdk import tool\n\nclass Input(BaseModel):\n    path: str\n\n"
            "@tool(description='Read something.')\ndef read(input: Input, ctx):\n    return 'x'\n")

    [problem] = problems(tmp_path, HEAD + "agent = Agent()\n", {"agent/tools/read.py": tool})
    assert problem.startswith("agent/tools/read.py: 'read' is a workspace tool")

    # Narrowed away, the name is the agent's own.
    root = make_agent(tmp_path / "narrowed", HEAD + "agent = Agent(tools=['ls'])\n", {"agent/tools/read.py": tool})
    assert set(load_agent_folder(root).tools) == {"read"}


def test_needs_approval_must_name_an_offered_workspace_tool(tmp_path):
    [problem] = problems(tmp_path, HEAD + "agent = Agent(runtime=local_runtime(needs_approval=['shell']), "
                                          "tools=['read'])\n")

    assert "needs_approval names 'shell'" in problem


def test_seed_files_need_a_local_runtime(tmp_path):
    [problem] = problems(tmp_path, HEAD + "agent = Agent(runtime=virtual_runtime(memory_fs()))\n",
                         {"agent/workspace/data.csv": "a,b\n"})

    assert problem.startswith("agent/workspace/: a virtual runtime has no directory to copy seed files into")


def test_seed_files_in_both_folders_are_refused(tmp_path):
    [problem] = problems(tmp_path, HEAD + "agent = Agent()\n",
                         {"agent/workspace/a.txt": "a", "agent/sandbox/workspace/b.txt": "b"})

    assert problem.startswith("agent/sandbox/workspace/: seed files are in agent/workspace/ already")


def test_bad_local_runtime_options_are_named(tmp_path):
    found = problems(tmp_path, HEAD + "agent = Agent(runtime=local_runtime(shell_timeout=0, env={'A B': 'x'}))\n")

    assert any("shell_timeout" in p for p in found) and any("'A B'" in p for p in found)


def test_the_manifest_describes_the_runtime(tmp_path):
    runtime = load_agent_folder(make_agent(tmp_path, HEAD + (
        "agent = Agent(runtime=local_runtime(shell_timeout=5, env={'MODE': 'test'}, needs_approval=['delete']))\n"
    ))).manifest()["runtime"]

    assert runtime == {"kind": "local", "shell": True, "shellTimeoutSeconds": 5, "outputLimitBytes": 65536,
                       "env": ["MODE"], "needsApproval": ["delete"], "toolsAllowlist": None,
                       "workspaceTools": ALL, "seedFiles": False, "network": False,
                       "limits": {"processes": 128, "memoryBytes": 4 << 30, "cpuSeconds": 11, "diskBytes": 1 << 30}}


# -- the filesystems ---------------------------------------------------------------------------

def test_union_fs_routes_each_path_to_the_longest_prefix():
    outer, inner, root = memory_fs({"/a.txt": "outer"}), memory_fs({"/a.txt": "inner"}), memory_fs({"/r.txt": "r"})
    fs = union_fs({"/": root, "/docs": outer, "/docs/deep": inner})

    assert fs.read(ReadArgs(path="/docs/a.txt")) == "outer"
    assert fs.read(ReadArgs(path="/docs/deep/a.txt")) == "inner"
    assert fs.read(ReadArgs(path="docs/deep/a.txt")) == "inner"  # relative paths start at /
    assert fs.read(ReadArgs(path="/r.txt")) == "r"
    assert fs.write(WriteArgs(path="/docs/deep/b.txt", content="new")) == {"path": "/docs/deep/b.txt", "bytes": 3}
    assert inner.read(ReadArgs(path="/b.txt")) == "new" and "b.txt" not in str(outer.snapshot())
    assert fs.ls(LsArgs(path="/docs"))["entries"] == [{"name": "a.txt", "type": "file", "size": 5},
                                                       {"name": "deep", "type": "dir"}]
    assert fs.ls(LsArgs(path="/"))["entries"] == [{"name": "docs", "type": "dir"},
                                                   {"name": "r.txt", "type": "file", "size": 1}]
    assert fs.glob(GlobArgs(pattern="**/*.txt"))["files"] == ["/docs/a.txt", "/docs/deep/a.txt", "/docs/deep/b.txt",
                                                              "/r.txt"]
    assert fs.glob(GlobArgs(pattern="deep/*.txt", path="/docs"))["files"] == ["/docs/deep/a.txt", "/docs/deep/b.txt"]
    assert fs.grep(GrepArgs(pattern="inner|outer", output_mode="files"))["files"] == ["/docs/a.txt",
                                                                                      "/docs/deep/a.txt"]
    assert fs.delete(DeleteArgs(path="/docs/deep/b.txt")) == {"path": "/docs/deep/b.txt", "deleted": 1}


def test_union_fs_offers_the_union_of_its_mounts_methods_and_never_shell():
    class WithShell:
        def read(self, args):
            return ""

        def shell(self, args, *, should_stop=None):
            return {}

    fs = union_fs({"/ro": memory_fs(writable=False), "/x": WithShell()})

    assert methods_of(fs) == {"read", "ls", "glob", "grep"}
    assert methods_of(union_fs({"/ro": memory_fs(writable=False), "/rw": memory_fs()})) == set(FILES_ONLY)


def test_a_verb_on_a_mount_without_it_is_refused():
    fs = union_fs({"/ro": memory_fs({"/a.txt": "a"}, writable=False), "/rw": memory_fs()})

    with pytest.raises(WorkspaceError, match="/ro does not support write"):
        fs.write(WriteArgs(path="/ro/a.txt", content="b"))
    with pytest.raises(WorkspaceError, match="nothing is mounted at /elsewhere/x"):
        fs.read(ReadArgs(path="/elsewhere/x"))


@pytest.mark.parametrize("mounts, message", [
    ({"docs": memory_fs()}, "must be an absolute path"),
    ({"/a/../b": memory_fs()}, "'..'"),
    ({"/x": object()}, "has no file methods"),
    ({}, "at least one mount"),
])
def test_union_fs_refuses_bad_mount_tables(mounts, message):
    with pytest.raises(ValueError, match=message):
        union_fs(mounts)


@pytest.mark.parametrize("path", ["../a.txt", "/a/../../b", "%2e%2e/a", "a\x00b", "a\\b"])
def test_memory_fs_refuses_hostile_paths(path):
    fs = memory_fs({"/a.txt": "a"})
    for call in (lambda: fs.read(ReadArgs(path=path)), lambda: fs.write(WriteArgs(path=path, content="x")),
                 lambda: fs.delete(DeleteArgs(path=path)), lambda: fs.ls(LsArgs(path=path))):
        with pytest.raises(WorkspaceError):
            call()
    assert fs.snapshot() == {"/a.txt": "a"}


def test_memory_fs_gives_each_session_its_own_copy():
    fs = memory_fs({"/a.txt": "start"})
    one, two = fs.for_session(SessionContext("ses_1", "x")), fs.for_session(SessionContext("ses_2", "x"))

    one.edit(EditArgs(path="/a.txt", old_text="start", new_text="one"))

    assert one.read(ReadArgs(path="/a.txt")) == "one"
    assert two.read(ReadArgs(path="/a.txt")) == "start" and fs.read(ReadArgs(path="/a.txt")) == "start"


def test_skills_fs_serves_the_agents_skills_read_only(tmp_path):
    root = make_agent(tmp_path, HEAD + "agent = Agent(runtime=virtual_runtime(union_fs({'/skills': skills_fs()})))\n",
                      {"agent/skills/triage.md": "---\ndescription: Sort incoming issues\n---\nStep one.\n",
                       "agent/skills/runbook/SKILL.md": "---\ndescription: Restart things\n---\nBody.\n",
                       "agent/skills/runbook/refs/restart.md": "How to restart.\n"})
    fs = load_agent_folder(root).runtime.fs

    assert fs.glob(GlobArgs(pattern="**"))["files"] == ["/skills/runbook/SKILL.md", "/skills/runbook/refs/restart.md",
                                                        "/skills/triage/SKILL.md"]
    assert fs.read(ReadArgs(path="/skills/triage/SKILL.md")) == (
        "---\nname: triage\ndescription: Sort incoming issues\n---\n\nStep one.\n")
    assert methods_of(fs) == {"read", "ls", "glob", "grep"}


def test_narrow_reports_what_a_workspace_cannot_honour():
    assert narrow(frozenset({"read", "write"}), ["edit", "grep"]) == (frozenset({"write"}), ["grep"])
    assert narrow(frozenset({"read"}), None) == (frozenset({"read"}), [])


def test_a_custom_filesystem_keeps_the_manifest_stable_between_loads(tmp_path):
    root = make_agent(tmp_path, HEAD + WRITE_ONLY_FS + "agent = Agent(runtime=virtual_runtime(union_fs({'/w': WriteOnly()})))\n")

    first, second = load_agent_folder(root).manifest(), load_agent_folder(root).manifest()

    assert first == second
    assert first["runtime"]["filesystem"] == "union_fs({'/w': WriteOnly()})"
