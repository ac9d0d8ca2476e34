"""A/B experiments at discovery: each mistake in `agent/ab.py` or `agent/ab/<name>.py` is one problem
naming its file; and the splits, as pure functions of the session id."""
from __future__ import annotations

from collections import Counter

import pytest

from agents.discovery import load_agent_folder
from agents.experiments import SplitContext, define_ab, split_by_session_hash, split_if
from tests.agents.folder_support import make_agent, minimal, only_problem

HEADER = "from agents.sdk import define_ab, split_by_session_hash\n"


def experiment(body: str) -> str:
    return HEADER + body + "\n"


def test_an_experiment_is_loaded_with_its_control(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/ab.py": experiment(
        'experiment = define_ab("tone", variants={"a": {"label": "A"}, "b": {"label": "B", "model": "scripted:echo"}})')}))
    loaded = load_agent_folder(root)
    assert list(loaded.experiments) == ["tone"]
    assert loaded.experiments["tone"].control == "a"  # no "control" id: the first declared
    assert loaded.manifest()["experiments"][0]["variants"][1] == {"id": "b", "label": "B", "model": "scripted:echo"}


def test_an_unknown_variant_key_names_the_file(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/ab/tone.py": experiment(
        'experiment = define_ab("tone", variants={"control": {"label": "A", "prompt": "hi"}})')}))
    problem = only_problem(root)
    assert problem.path == "agent/ab/tone.py"
    assert "variant 'control': unknown key(s) 'prompt'" in problem.message


@pytest.mark.parametrize("holdout", ["1", "1.5", "-0.1"])
def test_a_holdout_outside_zero_to_one_is_refused(tmp_path, holdout):
    root = make_agent(tmp_path, minimal(**{"agent/ab.py": experiment(
        f'experiment = define_ab("tone", variants={{"control": {{}}}}, split=split_by_session_hash(holdout={holdout}))')}))
    problem = only_problem(root)
    assert problem.path == "agent/ab.py" and "holdout must be in [0, 1)" in problem.message


def test_duplicate_experiment_names_are_refused(tmp_path):
    body = 'experiment = define_ab("tone", variants={"control": {}})'
    root = make_agent(tmp_path, minimal(**{"agent/ab/one.py": experiment(body), "agent/ab/two.py": experiment(body)}))
    problem = only_problem(root)
    assert problem.path == "agent/ab/two.py" and "'tone' is defined twice" in problem.message


def test_a_derive_that_is_not_callable_is_refused(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/ab.py": experiment(
        'experiment = define_ab("tone", variants={"control": {}}, derive={"calls": 3})')}))
    problem = only_problem(root)
    assert problem.path == "agent/ab.py" and "derive['calls'] is not callable" in problem.message


def test_a_variant_model_no_provider_serves_is_refused(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/ab.py": experiment(
        'experiment = define_ab("tone", variants={"control": {}, "b": {"model": "nowhere:big"}})')}))
    problem = only_problem(root)
    assert problem.path == "agent/ab.py"
    assert "variant 'b': no provider serves this model" in problem.message and "'nowhere'" in problem.message


def ctx(session_id: str, message: str = "", experiment: str = "tone") -> SplitContext:
    return SplitContext(session_id=session_id, agent="a", experiment=experiment, variants=("control", "b"),
                        message=message)


def test_the_hash_split_over_2000_sessions_is_even_within_tolerance_and_sticky():
    split = split_by_session_hash(holdout=0.1)
    ids = [f"ses_{i:024x}" for i in range(2000)]
    counts = Counter(split(ctx(i)) for i in ids)
    # Expected 200 held out and 900 per variant; 4 standard deviations of a binomial either way.
    assert abs(counts[None] - 200) <= 4 * (2000 * 0.1 * 0.9) ** 0.5, counts
    for variant in ("control", "b"):
        assert abs(counts[variant] - 900) <= 4 * (2000 * 0.45 * 0.55) ** 0.5, counts
    assert [split(ctx(i)) for i in ids[:50]] == [split(ctx(i)) for i in ids[:50]]  # same id, same answer
    # Another experiment splits the same sessions independently.
    other = [split(ctx(i, experiment="other")) for i in ids]
    assert sum(a == b for a, b in zip((split(ctx(i)) for i in ids), other)) < 1200


def test_holdout_zero_enrolls_everyone_and_near_one_almost_nobody():
    ids = [f"ses_{i}" for i in range(2000)]
    assert None not in {split_by_session_hash()(ctx(i)) for i in ids}
    assert sum(split_by_session_hash(holdout=0.99)(ctx(i)) is not None for i in ids) < 50


def test_split_if_splits_only_the_sessions_its_predicate_accepts():
    split = split_if(lambda c: c.message.startswith("vip"))
    assert split(ctx("ses_1", "hello")) is None
    assert {split(ctx(f"ses_{i}", "vip: hi")) for i in range(100)} == {"control", "b"}


def test_define_ab_needs_no_django():
    test = define_ab("x", variants={"control": {"label": "C"}, "t": {}})
    assert test.control == "control" and test.variants["t"].label == "t" and not test.problems
