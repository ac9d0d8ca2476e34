"""Tool files of agent folders: how each mistake in one is reported (the file and the fix)."""
from __future__ import annotations

import pytest

from agents.discovery import load_agent_folder

from .folder_support import GOOD_TOOL, make_agent, minimal, only_problem


def test_a_tool_file_without_a_tool_says_to_define_one(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": "def weather(input, ctx):\n    return 'sunny'\n"}))

    problem = only_problem(root)

    assert problem.path == "agent/tools/weather.py"
    assert "define exactly one tool with @tool(...) (found 0)" in problem.message


def test_a_tool_file_with_two_tools_says_one_per_file(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": GOOD_TOOL + """
    @tool(description="Say the wind in a city.")
    def wind(input: Input, ctx) -> str:
        return "calm"
    """}))

    problem = only_problem(root)

    assert problem.path == "agent/tools/weather.py"
    assert "(found 2)" in problem.message


@pytest.mark.parametrize("description", ["", "   "])
def test_a_tool_with_an_empty_description_says_to_give_one(tmp_path, description):
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": GOOD_TOOL.replace(
        'description="Say the weather in a city."', f"description={description!r}")}))

    problem = only_problem(root)

    assert problem.path == "agent/tools/weather.py"
    assert "@tool(description=...)" in problem.message


def test_a_tool_with_a_bad_effect_names_the_allowed_ones(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": GOOD_TOOL.replace(
        'description="Say the weather in a city."', 'description="Say the weather.", effect="delete"')}))

    problem = only_problem(root)

    assert problem.path == "agent/tools/weather.py"
    assert "effect must be 'read' or 'write', not 'delete'" in problem.message


def test_a_tool_with_a_bad_execution_names_the_allowed_ones(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": GOOD_TOOL.replace(
        'description="Say the weather in a city."', 'description="Say the weather.", execution="cloud"')}))

    problem = only_problem(root)

    assert "execution must be 'server' or 'agent', not 'cloud'" in problem.message


def test_a_tool_to_run_in_the_agents_workspace_is_refused_on_a_workspace_without_shell(tmp_path):
    root = make_agent(tmp_path, minimal(**{
        "agent/agent.py": "from agents.sdk import Agent, local_runtime\nagent = Agent(runtime=local_runtime(shell=False))\n",
        "agent/tools/weather.py": GOOD_TOOL.replace(
            'description="Say the weather in a city."', 'description="Say the weather.", execution="agent"')}))

    problem = only_problem(root)

    assert problem.path == "agent/tools/weather.py"
    assert "execution='agent'" in problem.message and "offers no shell" in problem.message
    assert "remove execution='agent'" in problem.message


def test_a_tool_to_run_in_the_agents_workspace_is_taken_on_a_local_runtime_with_shell(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": GOOD_TOOL.replace(
        'description="Say the weather in a city."', 'description="Say the weather.", execution="agent"')}))

    loaded = load_agent_folder(root)

    assert set(loaded.agent_tools()) == {"weather"} and loaded.server_tools() == {}
    [tool] = loaded.manifest()["tools"]
    assert (tool["execution"], tool["family"]) == ("agent", "agent")


def test_direct_call_without_needs_approval_says_to_remove_it(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": GOOD_TOOL.replace(
        'description="Say the weather in a city."', 'description="Say the weather.", direct_call=True')}))

    problem = only_problem(root)

    assert problem.path == "agent/tools/weather.py"
    assert "direct_call=True only lifts the approval of a needs_approval=True tool" in problem.message


@pytest.mark.parametrize("option", ["needs_approval", "direct_call"])
def test_approval_options_that_are_not_booleans_are_refused(tmp_path, option):
    # "no" is truthy: taken as is, direct_call="no" would allow direct calls.
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": GOOD_TOOL.replace(
        'description="Say the weather in a city."', f'description="Say the weather.", {option}="no"')}))

    problem = only_problem(root)

    assert f"{option} must be True or False, not 'no'" in problem.message


def test_time_args_naming_a_field_the_input_lacks_says_to_fix_the_name(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": GOOD_TOOL.replace(
        'description="Say the weather in a city."', 'description="Say the weather.", time_args=["when"]')}))

    problem = only_problem(root)

    assert problem.path == "agent/tools/weather.py"
    assert "time_args names 'when'" in problem.message
    assert "fix the name or add the field" in problem.message


def test_a_tool_without_an_input_model_says_how_to_declare_one(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": """
        from agents.sdk import tool

        @tool(description="Say the weather.")
        def weather(city: str, ctx) -> str:
            return "sunny"
    """}))

    problem = only_problem(root)

    assert problem.path == "agent/tools/weather.py"
    assert "failed to import" in problem.message
    assert "annotate the first parameter with a pydantic model" in problem.message


@pytest.mark.parametrize("file_name", ["Weather.py", "1weather.py", "get-weather.py", "wéather.py"])
def test_a_tool_file_name_that_is_not_a_tool_name_says_to_rename_it(tmp_path, file_name):
    root = make_agent(tmp_path, minimal(**{f"agent/tools/{file_name}": GOOD_TOOL}))

    problem = only_problem(root)

    assert problem.path == f"agent/tools/{file_name}"
    assert "rename the file" in problem.message


@pytest.mark.parametrize("entry", ["notes.txt", "helpers/__init__.py"])
def test_anything_but_a_python_file_in_tools_says_where_helpers_go(tmp_path, entry):
    root = make_agent(tmp_path, minimal(**{f"agent/tools/{entry}": "x = 1\n"}))

    problem = only_problem(root)

    assert problem.path == f"agent/tools/{entry.split('/')[0]}"
    assert "agent/lib/" in problem.message
