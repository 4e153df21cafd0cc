"""Environments: the guess_number game, the guarded instances TRL is given, the registry, environment_reward."""

from __future__ import annotations

import inspect
import time

import pytest
import user_tools
from transformers.utils import get_json_schema

import rewards
from grpo_recipes.agents import (
    ENVIRONMENTS,
    ToolError,
    ToolStats,
    get_environment_class,
    register_environment,
)
from grpo_recipes.agents.environments import GuessNumber, guarded_factory, tool_methods
from rewards.environment import EnvironmentReward, environment_outcome


@pytest.fixture
def release():
    user_tools.RELEASE.clear()
    yield
    user_tools.RELEASE.set()


def trl_discovery(instance) -> tuple[bool, bool, list[str]]:
    """What GRPOTrainer (TRL 1.16) finds on an environment instance: (has reset, has get_reward, tool names).

    The same walk as its __init__: the class's functions, reset and get_reward apart, private ones skipped."""
    has_reset = has_reward = False
    methods = []
    for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction):
        if name == "reset":
            has_reset = True
        elif name == "get_reward":
            has_reward = True
        elif not name.startswith("_"):
            methods.append(name)
    return has_reset, has_reward, methods


# ----------------------------------------------------------------------------------------------------------
# guess_number
# ----------------------------------------------------------------------------------------------------------


def test_guess_number_says_higher_lower_and_correct():
    game = GuessNumber(low=1, high=100, max_guesses=7)
    game.reset(secret=37, question="ignored", prompt=[])  # TRL passes the whole row
    assert [game.guess(n) for n in (50, 25, 37)] == ["lower", "higher", "correct: the number is 37"]
    assert game.get_reward() == 1.0
    assert game.guess(40) == "already found: the number is 37"
    assert game.guesses == [50, 25, 37]


def test_guess_number_limits_the_guesses_and_gives_zero_when_not_found():
    game = GuessNumber(max_guesses=2)
    game.reset(secret="9")  # a column read from a file may hold text
    assert [game.guess(1), game.guess(2)] == ["higher", "higher"]
    assert game.guess(9) == "no guesses left (the limit is 2)"
    assert game.get_reward() == 0.0


def test_guess_number_reset_starts_a_new_game():
    game = GuessNumber()
    game.reset(secret=5)
    game.guess(5)
    game.reset(secret=6)
    assert game.get_reward() == 0.0 and game.guesses == []
    assert game.guess("6") == "correct: the number is 6"  # a number given as text is read


def test_guess_number_refuses_a_guess_before_reset_and_bad_bounds():
    with pytest.raises(ToolError, match="the environment was not reset"):
        GuessNumber().guess(1)
    with pytest.raises(ValueError, match=r"low \(5\) must be below high \(5\)"):
        GuessNumber(low=5, high=5)


# ----------------------------------------------------------------------------------------------------------
# Guarded instances (what GRPOTrainer(environment_factory=...) gets)
# ----------------------------------------------------------------------------------------------------------


def test_trl_finds_reset_and_the_tools_but_no_reward_of_its_own():
    factory = guarded_factory(GuessNumber, {"max_guesses": 3})
    instance = factory()
    assert trl_discovery(instance) == (True, False, ["guess"])
    assert trl_discovery(GuessNumber()) == (True, True, ["guess"])  # the unguarded class would add a reward
    assert type(instance).__name__ == "GuessNumber" and type(instance).__doc__ == GuessNumber.__doc__


def test_each_instance_has_its_own_state():
    factory = guarded_factory(GuessNumber, {})
    first, second = factory(), factory()
    first.reset(secret=3)
    second.reset(secret=4)
    assert first.guess(number=3).startswith("correct") and second.guess(number=3) == "higher"
    assert environment_outcome(first) == 1.0 and environment_outcome(second) == 0.0


def test_the_guarded_tool_method_is_described_exactly_as_the_original():
    instance = guarded_factory(GuessNumber, {})()
    bound = instance.guess
    assert bound.__name__ == "guess" and inspect.getdoc(bound) == inspect.getdoc(GuessNumber.guess)
    assert get_json_schema(bound) == get_json_schema(GuessNumber().guess)
    assert list(inspect.signature(bound).parameters) == ["number"]


def test_a_users_environment_with_postponed_annotations_is_described_as_its_own_methods():
    """`from __future__ import annotations` makes annotations strings, which resolve in the user's module
    (Literal is imported there, not in the package)."""
    cls, params = get_environment_class("user_tools:Walk", {"start": 2})
    instance = guarded_factory(cls, params)()
    assert trl_discovery(instance) == (True, False, ["fail", "move", "wait"])
    for name in ("move", "wait", "fail"):
        assert get_json_schema(getattr(instance, name)) == get_json_schema(getattr(user_tools.Walk(), name))
    move = get_json_schema(instance.move)["function"]["parameters"]
    assert move["properties"]["direction"]["enum"] == ["left", "right"]


def test_guarded_calls_never_raise_and_are_counted(release):
    stats = ToolStats()
    factory = guarded_factory(user_tools.Walk, {}, timeout_seconds=0.2, max_result_chars=5, stats=stats)
    walk = factory()
    assert walk.reset(start=10) == " You stand at 10."
    assert walk.move(direction="right", steps=3) == "at 13"
    assert walk.move("left") == "at 12"  # positional arguments too
    start = time.monotonic()
    assert walk.wait(seconds=30) == "Error: wait did not finish within 0.2 s"
    assert time.monotonic() - start < 5
    assert walk.fail(message="broken\nbadly") == "Error: RuntimeError: broken badly"
    assert walk.move(direction="up", steps=1000) == "at -\n[... cut: 7 characters in all ...]\n8"
    assert walk.move(way="right") == "Error: bad arguments for move: missing a required argument: 'direction'"
    assert stats.as_dict() == {"calls": 6, "failures": 3, "timeouts": 1, "truncated": 1}
    assert environment_outcome(walk) == -988.0


def test_guess_number_errors_through_the_guard():
    stats = ToolStats()
    game = guarded_factory(GuessNumber, {}, stats=stats)()
    assert game.guess(number=1) == "Error: there is no game: the environment was not reset"
    game.reset(secret=1)
    assert game.guess(number="one") == "Error: ValueError: invalid literal for int() with base 10: 'one'"
    assert stats.as_dict() == {"calls": 2, "failures": 2, "timeouts": 0, "truncated": 0}


def test_constructor_params_reach_the_environment():
    game = guarded_factory(GuessNumber, {"low": 10, "high": 20, "max_guesses": 1})()
    assert (game.inner.low, game.inner.high, game.inner.max_guesses) == (10, 20, 1)


# ----------------------------------------------------------------------------------------------------------
# The registry
# ----------------------------------------------------------------------------------------------------------


def test_shipped_and_import_path_environments_with_checked_params():
    assert ENVIRONMENTS["guess_number"] is GuessNumber
    assert get_environment_class("guess_number", {"high": 50}) == (GuessNumber, {"high": 50})
    assert get_environment_class("user_tools:Walk") == (user_tools.Walk, {})
    assert list(tool_methods(user_tools.Walk)) == ["fail", "move", "wait"]


@pytest.mark.parametrize(
    "name, params, key, problem",
    [
        ("guess_numbers", {}, "name", "unknown environment 'guess_numbers'. Shipped: guess_number;"),
        ("guess_number", {"highest": 5}, "params", "unknown key 'highest'"),
        ("guess_number", {"high": "many"}, "params.high", "expected an integer, got 'many'"),
        ("user_tools:Walk", {"begin": 1}, "params", "unknown key 'begin'. Allowed: start."),
        ("user_tools:Nowhere", {}, "name", "has no attribute 'Nowhere'"),
        ("user_tools:convert", {}, "name", "user_tools:convert is not a class"),
        ("user_tools:NoReset", {}, "name", "environment user_tools:NoReset has no reset() method."),
        ("user_tools:NoReward", {}, "name", "environment user_tools:NoReward has no get_reward() method."),
        ("user_tools:NoPublicMethod", {}, "name", "has no public method for the model to call"),
        (
            "user_tools:UndescribedMethod",
            {},
            "name",
            "user_tools:UndescribedMethod.act cannot be described to the model: parameter 'y' is not described",
        ),
    ],
)
def test_environments_that_cannot_be_used_are_tool_errors_naming_the_key(name, params, key, problem):
    with pytest.raises(ToolError) as caught:
        get_environment_class(name, params)
    assert caught.value.key == key and problem in caught.value.problem, caught.value


def test_a_registered_environment_is_found_by_name(monkeypatch):
    monkeypatch.setitem(ENVIRONMENTS, "walk", None)  # removed again after the test
    register_environment("walk")(user_tools.Walk)
    assert get_environment_class("walk", {"start": 1}) == (user_tools.Walk, {"start": 1})


# ----------------------------------------------------------------------------------------------------------
# environment_reward
# ----------------------------------------------------------------------------------------------------------


class Broken:
    def get_reward(self) -> float:
        raise RuntimeError("lost")


class Undecided:
    def get_reward(self):
        return None


def test_environment_reward_scores_each_completion_by_its_environment():
    reward = rewards.get_reward("environment_reward")
    assert isinstance(reward, EnvironmentReward) and reward.__name__ == "environment_reward"
    factory = guarded_factory(GuessNumber, {})
    won, lost, unplayed = factory(), factory(), factory()
    for game, secret in ((won, 7), (lost, 8), (unplayed, 9)):
        game.reset(secret=secret)
    won.guess(number=7)
    lost.guess(number=7)
    environments = [won, lost, unplayed, None, Broken(), Undecided(), GuessNumber()]
    scores = reward(["", "", "", "", "", "", ""], environments=environments)
    assert scores == [1.0, 0.0, 0.0, None, None, None, 0.0]


def test_environment_reward_without_environments_is_unscorable_and_counts_must_match():
    reward = rewards.get_reward("environment_reward")
    assert reward(["a", "b"]) == [None, None]
    with pytest.raises(ValueError, match="1 environments for 2 completions"):
        reward(["a", "b"], environments=[GuessNumber()])
