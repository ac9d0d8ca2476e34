"""An agent spec as an agent folder, and back.

`write` makes the folder a deploy takes: `agent/console.json` (the spec itself, so that the
release holds what the editor shows), `instructions.md`, an `agent.py` of literals, `mcp.json`,
and the skills, subagents and schedules as their files. The same spec is always the same bytes,
so saving it again is the same content hash (a release is reused, not numbered anew), and a
console agent exported as a folder deploys to the hash it had.

`read` is the other way, for turning a folder agent into a console agent: what a folder holds
that data cannot say (Python tools, hooks, channels, a schedule or skill written in Python) is
refused, each problem naming its file.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import frontmatter

from agents.console.spec import AgentSpec, SpecError, parse
from agents.discovery.loaded import Problem
from agents.workspaces.runtimes import local_runtime

SPEC_FILE = "agent/console.json"


def dumped(spec: AgentSpec) -> str:
    """The spec as `console.json` holds it: its fields in their order, and every map in the order given
    (an A/B experiment's first variant is its control when none is named so)."""
    return json.dumps(spec.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=False) + "\n"


def write(spec: AgentSpec, root: Path, tool_files: dict[str, str] | None = None) -> Path:
    """Write `spec` as an agent folder at `root`, with the shared tools' files (`toolsFrom`) it takes
    from other agents' releases, by tool name (`agents.console.saving.shared_tool_files`)."""
    base = root / "agent"
    base.mkdir(parents=True, exist_ok=True)
    files = {"console.json": dumped(spec), "instructions.md": spec.instructions.strip() + "\n",
             "agent.py": agent_py(spec)}
    files.update({f"tools/{name}.py": text for name, text in sorted((tool_files or {}).items())})
    if spec.mcp_servers:
        files["mcp.json"] = json.dumps({"mcpServers": spec.mcp_servers}, indent=2, sort_keys=True) + "\n"
    for skill in spec.skills:
        files[f"skills/{skill.name}/SKILL.md"] = frontmatter.dumps(
            frontmatter.Post(skill.body.strip(), description=skill.description)) + "\n"
        for path, text in sorted(skill.files.items()):
            files[f"skills/{skill.name}/{path}"] = text
    for sub in spec.subagents:
        declared = {"description": sub.description, **({"model": sub.model} if sub.model else {}),
                    **({"params": sub.params} if sub.params else {})}
        files[f"subagents/{sub.id}/agent.py"] = _declaration("agent", "Agent", declared)
        files[f"subagents/{sub.id}/instructions.md"] = sub.instructions.strip() + "\n"
    for schedule in spec.schedules:
        meta = {"cron": schedule.cron, **({"title": schedule.title} if schedule.title else {})}
        files[f"schedules/{schedule.id}.md"] = frontmatter.dumps(frontmatter.Post(schedule.prompt.strip(), **meta)) + "\n"
    if spec.slack is not None:
        files["channels/slack.py"] = _declaration("channel", "slack_channel", spec.slack.model_dump(exclude_defaults=True))
    for hook in spec.webhooks:
        files[f"channels/{hook.id}.py"] = _declaration("channel", "webhook_channel",
                                                       hook.model_dump(exclude={"id"}, exclude_defaults=True))
    for test in spec.experiments:
        variants = {vid: v.model_dump(exclude_defaults=True) for vid, v in test.variants.items()}
        files[f"ab/{test.name}.py"] = _declaration(
            "experiment", "define_ab", {"name": test.name, "variants": variants},
            also=(f"split=split_by_session_hash(holdout={test.holdout!r})", "split_by_session_hash"))
    for relative, text in files.items():
        path = base / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def agent_py(spec: AgentSpec) -> str:
    """`agent = Agent(...)` with the spec's declarations, each a Python literal (nothing else runs)."""
    declared: dict[str, Any] = {}
    for key, value in (("name", spec.name), ("description", spec.description), ("models", spec.models),
                       ("fallback", spec.fallback), ("params", spec.params), ("max_steps", spec.max_steps),
                       ("retention_days", spec.retention_days), ("budget", spec.budget),
                       ("builtins", spec.builtins), ("reminders_tool", spec.reminders_tool), ("peers", spec.peers),
                       ("tools", spec.workspace_tools)):
        # Left out when it is Agent's default; 0 days of retention (keep forever) and no tools ([]) are not.
        if value is not None and value is not False and value not in ("", {}) and (value != [] or key == "tools"):
            declared[key] = value
    network = ("runtime=local_runtime(network=True)", "local_runtime") if spec.sandbox_network else None
    return _declaration("agent", "Agent", declared, also=network)


def _declaration(name: str, call: str, keywords: dict[str, Any], also: tuple[str, str] | None = None) -> str:
    """A file of `name = call(...)` from the SDK: each keyword a literal, one a line; `also`: one more
    argument that is itself an SDK call of literals, and the name it imports."""
    arguments = [f"    {key}={value!r}," for key, value in keywords.items()] + ([f"    {also[0]},"] if also else [])
    body = f"{call}(\n" + "\n".join(arguments) + "\n)" if arguments else f"{call}()"
    imports = call + (f", {also[1]}" if also else "")
    return (f"# Written from agent/console.json by the console: edit the agent there, not here.\n"
            f"from agents.sdk import {imports}\n\n{name} = {body}\n")


def spec_of(root: Path) -> AgentSpec | None:
    """The spec a console agent's folder (a release) holds; None for a folder agent's."""
    path = root / SPEC_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except ValueError as exc:
        raise SpecError([Problem(SPEC_FILE, f"not JSON this server writes: {exc}")]) from None
    return parse(data)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no number JSON holds")


def read(root: Path, manifest: dict[str, Any], subagent_params: dict[str, dict[str, Any]] | None = None) -> AgentSpec:
    """A folder agent (deployed: its folder and manifest, and its subagents' model parameters, which the
    manifest does not list) as a spec, or SpecError naming each file that data cannot hold."""
    base = root / "agent"
    refused = [Problem(f"agent/tools/{t['name']}.py", "a Python tool stays in a folder: a console agent has "
                                                        "no tools of its own (remove it, or keep the agent a folder; "
                                                        "a folder agent may share it, see toolsFrom)")
               for t in manifest.get("tools", [])]
    for pattern, what in (("hooks/*.py", "a hook"), ("channels/*.py", "a channel"), ("schedules/*.py",
                          "a schedule written in Python"), ("skills/*.py", "a skill written in Python"),
                          ("ab.py", "an A/B experiment"), ("ab/*.py", "an A/B experiment written in Python"),
                          ("workspace/**/*", "a workspace seed file")):
        refused += [Problem(p.relative_to(root).as_posix(), f"{what} is not held by a console agent")
                    for p in sorted(base.glob(pattern)) if p.is_file()]
    refused += _declared_in_python(base, manifest)
    runtime = manifest.get("runtime") or {}
    if refused:
        raise SpecError(refused)
    model = manifest.get("model", "")
    data: dict[str, Any] = {
        "name": manifest.get("name", ""), "description": manifest.get("description", ""),
        "instructions": (base / "instructions.md").read_text(encoding="utf-8"),
        "models": list(manifest.get("models") or [model] if model else []),
        "fallback": list(manifest.get("fallback") or []),
        "params": manifest.get("params") or {}, "maxSteps": manifest.get("maxSteps"),
        "retentionDays": manifest.get("retentionDays"), "budget": manifest.get("budget"),
        "builtins": list(manifest.get("builtins") or []), "remindersTool": bool(manifest.get("remindersTool")),
        "peers": list(manifest.get("peers") or []),
        "workspaceTools": runtime.get("toolsAllowlist"), "sandboxNetwork": bool(runtime.get("network")),
        "skills": [_skill(base, s) for s in manifest.get("skills", [])],
        "subagents": [{**_subagent(base, s, model), "params": (subagent_params or {}).get(s["id"], {})}
                      for s in manifest.get("subagents", [])],
        "schedules": [_schedule(base, s) for s in manifest.get("schedules", [])],
    }
    if (base / "mcp.json").is_file():
        data["mcpServers"] = json.loads((base / "mcp.json").read_text(encoding="utf-8")).get("mcpServers", {})
    return parse(data)


def _declared_in_python(base: Path, manifest: dict[str, Any]) -> list[Problem]:
    """What `agent.py` declares beyond what data holds: a runtime other than the default local one (but for
    its network and tools), MCP servers declared in Python, peers on other servers, seed files."""
    found = []
    runtime = dict(manifest.get("runtime") or {})
    if runtime.get("kind", "local") != "local":
        found.append(f"a {runtime['kind']} runtime")
    else:
        plain = local_runtime(network=bool(runtime.get("network"))).describe()
        if changed := sorted(key for key, value in plain.items() if key != "network" and runtime.get(key) != value):
            found.append(f"local_runtime(...) settings besides network ({', '.join(changed)})")
        if runtime.get("seedFiles"):
            found.append("workspace seed files")
    in_json = set()
    if (base / "mcp.json").is_file():
        in_json = set(json.loads((base / "mcp.json").read_text(encoding="utf-8")).get("mcpServers", {}))
    if in_python := sorted(m["name"] for m in manifest.get("mcp", []) if m.get("name") not in in_json):
        found.append(f"MCP servers declared in Python ({', '.join(in_python)}): move them to agent/mcp.json")
    if manifest.get("remotePeers"):
        found.append("peers on other servers (remotePeers)")
    return [Problem("agent/agent.py", f"{what} is not held by a console agent") for what in found]


def _skill(base: Path, skill: dict[str, Any]) -> dict[str, Any]:
    source = next((p for p in (base.parent / skill.get("source", ""), base / skill.get("source", ""))
                   if skill.get("source") and p.is_file()), base / "skills" / f"{skill['name']}.md")
    packaged = source.name == "SKILL.md"
    post = frontmatter.loads(source.read_text(encoding="utf-8"))
    files = {}
    if packaged:
        files = {p.relative_to(source.parent).as_posix(): p.read_text(encoding="utf-8")
                 for p in sorted(source.parent.rglob("*")) if p.is_file() and p != source}
    return {"name": skill["name"], "description": skill["description"], "body": post.content, "files": files}


def _subagent(base: Path, sub: dict[str, Any], model: str) -> dict[str, Any]:
    instructions = (base / "subagents" / sub["id"] / "instructions.md").read_text(encoding="utf-8")
    return {"id": sub["id"], "description": sub["description"], "instructions": instructions,
            "model": "" if sub.get("model") in (None, "", model) else sub["model"]}


def _schedule(base: Path, schedule: dict[str, Any]) -> dict[str, Any]:
    post = frontmatter.loads((base / "schedules" / f"{schedule['id']}.md").read_text(encoding="utf-8"))
    return {"id": schedule["id"], "cron": schedule["cron"], "prompt": post.content,
            "title": schedule.get("title") or ""}
