"""A reward of one's own by import path (rewards.imports, rewards.function_reward, rewards.build_reward):
found beside the recipe first, a plain function wrapped so that it cannot stop a step, a Reward subclass
checked like a shipped one, and errors that say where it looked."""

from __future__ import annotations

import logging
import pickle
import sys
import textwrap
import time

import pytest

import rewards
from rewards import function_reward
from rewards.registry import InvalidRewardParamsError, UnknownRewardError

MODULE = '''
import time

from rewards import Reward, Sample, completion_text, register


def exact(completions, solution, **kwargs):
    """1.0 when the completion is the solution."""
    return [1.0 if completion_text(c).strip() == s else 0.0 for c, s in zip(completions, solution)]


def fragile(completions, solution, **kwargs):
    """Raises on an empty completion (a bug of the user's, tripped by one completion)."""
    return [1.0 / len(completion_text(c)) for c in completions]


def slow(completions, **kwargs):
    time.sleep(5)
    return [1.0] * len(completions)


def wrong_length(completions, **kwargs):
    return [1.0]


def not_a_list(completions, **kwargs):
    return "yes"


def scaled(completions, solution, factor: float = 1.0, **kwargs):
    return [factor * (completion_text(c) == s) for c, s in zip(completions, solution)]


class Contains(Reward):
    """1.0 when the completion contains `needle`."""

    def __init__(self, *, needle: str = "42") -> None:
        self.needle = needle

    def score(self, sample: Sample) -> float:
        return float(self.needle in sample.text)
'''


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A user's folder outside the repository with `my_rewards.py`, and a working directory elsewhere."""
    home = tmp_path / "task"
    home.mkdir()
    name = f"my_rewards_{tmp_path.name.replace('-', '_')}"  # one module per test: imports are cached
    (home / f"{name}.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)
    yield home, name
    sys.modules.pop(name, None)


def test_a_plain_function_beside_the_recipe(folder):
    home, name = folder
    reward = rewards.build_reward(f"{name}:exact", {}, search=[home])
    assert reward.__name__ == "exact" and reward.origin == str(home / f"{name}.py")
    assert reward.required_columns == ("solution",)
    chat = [[{"role": "assistant", "content": "7"}], [{"role": "assistant", "content": "8"}]]
    assert reward(chat, solution=["7", "7"]) == [1.0, 0.0]


def test_an_exception_scores_only_its_completion_none_counted_and_logged_once_with_the_row(folder, caplog):
    home, name = folder
    reward = rewards.build_reward(f"{name}:fragile", {}, search=[home])
    with caplog.at_level(logging.WARNING, logger="rewards.function_reward"):
        assert reward(["ab", "", "abcd"], solution=["x", "y", "z"]) == [0.5, None, 0.25]
        assert reward(["", "a"], solution=["w", "v"]) == [None, 1.0]
    assert reward.failures == {"exceptions": 2, "timeouts": 0, "bad_results": 0}
    logged = [r.getMessage() for r in caplog.records if "fragile" in r.getMessage()]
    assert len(logged) == 1 and "ZeroDivisionError" in logged[0] and "'solution': \"'y'\"" in logged[0]


def test_a_slow_function_is_bounded_and_a_wrong_answer_shape_scores_none(folder, monkeypatch):
    home, name = folder
    monkeypatch.setattr(function_reward, "TIMEOUT_SECONDS_PER_COMPLETION", 0.2)
    reward = rewards.build_reward(f"{name}:slow", {}, search=[home])
    began = time.monotonic()
    assert reward(["a", "b"]) == [None, None]
    assert time.monotonic() - began < 2 and reward.failures["timeouts"] == 1
    wrong = rewards.build_reward(f"{name}:wrong_length", {}, search=[home])
    assert wrong(["a", "b"]) == [1.0, 1.0]  # one at a time, each answer is one score
    assert wrong.failures["bad_results"] == 0
    neither = rewards.build_reward(f"{name}:not_a_list", {}, search=[home])
    assert neither(["a", "b"]) == [None, None] and neither.failures["bad_results"] == 2


def test_params_go_to_the_function_and_must_be_its_parameters(folder):
    home, name = folder
    reward = rewards.build_reward(f"{name}:scaled", {"factor": 0.5}, search=[home])
    assert reward(["7", "8"], solution=["7", "7"]) == [0.5, 0.0]
    with pytest.raises(InvalidRewardParamsError, match="params bonus are not parameters of the function"):
        rewards.build_reward(f"{name}:scaled", {"bonus": 1}, search=[home])


def test_a_reward_class_gets_its_params_checked(folder):
    home, name = folder
    reward = rewards.build_reward(f"{name}:Contains", {"needle": "7"}, search=[home])
    assert reward.__name__ == "Contains" and reward(["17", "8"]) == [1.0, 0.0]
    assert reward.origin == str(home / f"{name}.py")
    with pytest.raises(InvalidRewardParamsError, match="needle"):
        rewards.build_reward(f"{name}:Contains", {"needle": 3, "other": 1}, search=[home])


def test_where_it_looked_when_it_is_nowhere(folder, tmp_path):
    home, name = folder
    with pytest.raises(UnknownRewardError) as caught:
        rewards.build_reward("nowhere_module:f", {}, search=[home])
    message = str(caught.value)
    assert f"looked in {home}, the working directory {tmp_path}, and installed packages" in message
    with pytest.raises(UnknownRewardError, match="has no attribute 'missing'"):
        rewards.build_reward(f"{name}:missing", {}, search=[home])
    with pytest.raises(InvalidRewardParamsError, match="must take completions"):
        rewards.build_reward("os.path:join", {}, search=[home])


def test_it_pickles_by_import_path(folder):
    home, name = folder
    reward = rewards.build_reward(f"{name}:scaled", {"factor": 2.0}, search=[home])
    clone = pickle.loads(pickle.dumps(reward))
    assert clone(["7"], solution=["7"]) == [2.0] and clone.origin == reward.origin
