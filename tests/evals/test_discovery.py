"""Finding cases: ids from paths and `id=`, config, selection, and errors that name the file and the fix."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agents.evals.discovery import EvalFileError, discover_cases, load_config, select_cases
from tests.support import ROOT, child_env


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


TEST = "def test(t):\n    t.send('hi')\n"
LIST = ("from agents.sdk import define_eval\n"
        "cases = define_eval(tags=['smoke'], cases=[{'id': 'nyc', 'test': lambda t: None, 'tags': ['city']},\n"
        "                                            {'id': 'paris', 'test': lambda t: None}])\n")


def test_case_ids_come_from_the_path_and_the_case_list(tmp_path):
    write(tmp_path, {"evals/weather_eval.py": TEST, "evals/weather/nyc_eval.py": TEST, "evals/cities_eval.py": LIST,
                     "evals/helpers.py": "x = 1\n", "agent/evals/ignored_eval.py": TEST})
    cases = discover_cases(tmp_path)
    assert [c.id for c in cases] == ["cities/nyc", "cities/paris", "weather", "weather/nyc"]
    assert cases[0].tags == ("smoke", "city")


def test_tags_and_ids_select(tmp_path):
    write(tmp_path, {"evals/weather_eval.py": TEST, "evals/weather/nyc_eval.py": TEST, "evals/cities_eval.py": LIST})
    cases = discover_cases(tmp_path)
    assert [c.id for c in select_cases(cases, ["weather"], [])] == ["weather", "weather/nyc"]
    assert [c.id for c in select_cases(cases, ["cities/paris", "weather/nyc"], [])] == ["cities/paris", "weather/nyc"]
    assert [c.id for c in select_cases(cases, [], ["city"])] == ["cities/nyc"]
    assert [c.id for c in select_cases(cases, ["cities"], ["smoke"])] == ["cities/nyc", "cities/paris"]


@pytest.mark.parametrize("text, words", [
    ("x = 1\n", "declares no case"),
    (TEST + LIST, "both define_eval(...) and a test(t)"),
    ("def test():\n    pass\n", "write `def test(t):`"),
    ("import nowhere_to_be_found\n", "ModuleNotFoundError"),
    ("from agents.sdk import define_eval\ncases = define_eval(cases=[{'test': print}, {'test': print}])\n",
     "give every case of a list of several an `id`"),
])
def test_a_bad_file_is_named_with_the_fix(tmp_path, text, words):
    write(tmp_path, {"evals/bad_eval.py": text})
    with pytest.raises(EvalFileError) as caught:
        discover_cases(tmp_path)
    assert str(tmp_path / "evals" / "bad_eval.py") in str(caught.value)
    assert words in str(caught.value) and "fix:" in str(caught.value)


def test_evals_inside_agent_are_pointed_out(tmp_path):
    write(tmp_path, {"agent/evals/smoke_eval.py": TEST, "evals/README.md": ""})
    with pytest.raises(EvalFileError, match="is ignored: evals live beside agent/"):
        discover_cases(tmp_path)


def test_max_concurrency_defaults_to_20_and_is_capped_at_200(tmp_path):
    assert load_config(tmp_path).max_concurrency == 20
    write(tmp_path, {"evals/config.py": "max_concurrency = 7\n"})
    assert load_config(tmp_path).max_concurrency == 7
    write(tmp_path, {"evals/config.py": "max_concurrency = 201\n"})
    with pytest.raises(EvalFileError, match="from 1 to 200"):
        load_config(tmp_path)


def test_the_sdk_imports_without_django_set_up():
    code = ("from agents.sdk import define_eval, includes, satisfies, case, Trial\n"
            "from django.conf import settings\nassert not settings.configured")
    env = child_env()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)
