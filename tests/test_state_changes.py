"""State changes live on the models: no conditional update of a session's rows elsewhere.

A `.update(...)` of a Session, Turn, ToolCall, Schedule, Reminder or
ChannelDelivery queryset (or a call of the written-out `update_where`) is a
transition, and transitions are model methods that say whether they won
(sessions/models/). sessions/turn/lifecycle.py composes them and is the one other
place allowed to; sessions/sql/ holds the written-out statements those methods
call, each beside the ORM update it replaces. The walk sees a queryset reached from `<Model>.objects`
(or `_default_manager`) in one expression, or through a name assigned such
an expression in the same module; migrations and tests are left out.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("agents", "sessions", "channels_app", "agentsite")
MODELS = frozenset({"Session", "Turn", "ToolCall", "Schedule", "Reminder", "ChannelDelivery", "PersonalToken"})
MANAGERS = frozenset({"objects", "_default_manager", "_base_manager"})
ALLOWED = ("sessions/models/", "sessions/turn/lifecycle.py", "sessions/sql/")
# Methods that return a queryset: a name assigned one can be updated later.
QUERYSETS = frozenset({"all", "filter", "exclude", "select_for_update", "select_related", "prefetch_related", "only",
                       "defer", "order_by", "using"})


def _root_of(node: ast.expr) -> ast.expr:
    """Walk down a chain like `Session.objects.filter(...).exclude(...)` to where it starts, noting managers."""
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            if node.attr in MANAGERS and isinstance(node.value, ast.Name) and node.value.id in MODELS:
                return node
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return node


def _from_model(node: ast.expr, tainted: set[str]) -> bool:
    root = _root_of(node)
    return isinstance(root, ast.Attribute) or (isinstance(root, ast.Name) and root.id in tainted)


def _is_queryset(node: ast.expr) -> bool:
    """`Session.objects` or a chain of queryset methods on it (not a row: `.get()`, `.first()`)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in QUERYSETS:
        return _from_model(node.func.value, set())
    return isinstance(node, ast.Attribute) and _root_of(node) is node


def state_changes(source: str) -> list[tuple[int, str]]:
    """(line, what) of every conditional update of the models above in `source`."""
    tree = ast.parse(source)
    tainted: set[str] = set()
    for node in ast.walk(tree):  # names holding a queryset of one of the models
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _is_queryset(node.value):
                tainted.update(t.id for t in targets if isinstance(t, ast.Name))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "update" and _from_model(func.value, tainted):
            found.append((node.lineno, ast.unparse(func)))
        elif (isinstance(func, ast.Name) and func.id == "update_where") or (
                isinstance(func, ast.Attribute) and func.attr == "update_where"):
            found.append((node.lineno, "update_where"))
    return sorted(found)


def outside_the_models() -> list[str]:
    problems = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if {"migrations", "tests"} & set(relative.parts) or relative.as_posix().startswith(ALLOWED):
                continue
            for line, what in state_changes(path.read_text(encoding="utf-8")):
                problems.append(f"{relative}:{line} {what}")
    return problems


def test_rows_change_only_through_model_methods():
    problems = outside_the_models()
    assert not problems, "state changes outside sessions/models/ and sessions/turn/lifecycle.py:\n" + "\n".join(problems)


def test_the_checker_finds_updates_of_the_models():
    source = (
        "from sessions.models import Session, Reminder\n"
        "def f(pk, now):\n"
        "    Session.objects.filter(pk=pk).update(channel_cursor=3)\n"
        "    Reminder.objects.filter(pk=pk).exclude(status='done').select_for_update().update(reason='x')\n"
        "    rows = Session._default_manager.filter(pk=pk)\n"
        "    rows.update(channel_lease_until=None)\n"
        "    update_where(Session, {'id': pk}, {'status': 'idle'})\n"
    )
    assert [line for line, _ in state_changes(source)] == [3, 4, 6, 7]


def test_the_checker_leaves_other_updates_alone():
    source = (
        "from sessions.models import Artifact, Session\n"
        "def f(pk, channel, fields):\n"
        "    fields.update(status='done')\n"
        "    channel.state.update({'reply': None})\n"
        "    Artifact.objects.filter(session_id=pk).update(size=1)\n"
        "    Session.objects.filter(pk=pk).exists()\n"
        "    row = Session.objects.get(pk=pk)\n"
        "    row.claim_channel_lease(None, None)\n"
        "    row.channel_state.update({'a': 1})\n"
    )
    assert state_changes(source) == []
