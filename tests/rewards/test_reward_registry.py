"""The registry: names, params validation, the TRL calling convention, picklability, cheap construction."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pickle
import subprocess
import sys
import time

import pytest

import rewards
from rewards import (
    REQUIRED,
    InvalidRewardParamsError,
    Reward,
    Sample,
    UnknownRewardError,
    get_reward,
    register,
    registry,
)
from rewards.worker_pool import POOL

EXPECTED = [
    "answer_format",
    "code_stdio",
    "code_tests",
    "cosine_length",
    "countdown",
    "environment_reward",
    "gsm8k_accuracy",
    "math_accuracy",
    "numeric_accuracy",
    "reasoning_gym",
    "repetition_penalty",
    "soft_overlong",
    "tag_count",
    "think_format",
]
REQUIRED_PARAMS = {
    "soft_overlong": {"max_completion_length": 100, "cache_length": 20},
    "cosine_length": {"max_length": 100},
}
MODULES = [
    "rewards.base",
    "rewards.registry",
    "rewards.typecheck",
    "rewards.extract",
    "rewards.number_parsing",
    "rewards.latex_normalize",
    "rewards.math_rewards",
    "rewards.numeric_rewards",
    "rewards.format_rewards",
    "rewards.countdown",
    "rewards.length",
    "rewards.repetition",
    "rewards.code",
    "rewards.environment",
    "rewards",
]


def build(name: str) -> Reward:
    return get_reward(name, **REQUIRED_PARAMS.get(name, {}))


def test_available_rewards_are_sorted_and_complete():
    assert rewards.available_rewards() == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_reward_is_a_picklable_instance_named_after_the_registry(name):
    reward = build(name)
    assert isinstance(reward, Reward) and not inspect.isfunction(reward)  # an instance, not a closure
    assert reward.__name__ == name
    clone = pickle.loads(pickle.dumps(reward))
    assert clone.__name__ == name and clone.params == reward.params and type(clone) is type(reward)
    assert repr(clone) == repr(reward) and repr(reward).startswith(f"get_reward({name!r}")


@pytest.mark.parametrize("name", EXPECTED)
def test_every_param_is_reported_and_stored(name):
    reward = build(name)
    params = rewards.reward_params(name)
    assert set(reward.params) == set(params)
    for key, default in params.items():
        if default is not REQUIRED and key not in REQUIRED_PARAMS.get(name, {}):
            assert reward.params[key] == default or (default is None and reward.params[key] in ({}, None))


def test_reward_params_report_defaults():
    assert rewards.reward_params("numeric_accuracy") == {"last_number_fallback": True}
    assert rewards.reward_params("gsm8k_accuracy") == {"last_number_fallback": False}
    assert rewards.reward_params("math_accuracy") == {
        "answer_format": "boxed",
        "timeout_seconds": 5.0,
        "num_workers": 1,
    }
    assert rewards.reward_params("think_format") == {"strict": False, "think_prefilled": False}
    assert rewards.reward_params("soft_overlong")["max_completion_length"] is REQUIRED
    assert repr(REQUIRED) == "REQUIRED" and pickle.loads(pickle.dumps(REQUIRED)) is REQUIRED


def test_unknown_reward_lists_names_and_suggests_the_closest():
    with pytest.raises(UnknownRewardError) as caught:
        get_reward("math_acuracy")
    error = caught.value
    assert isinstance(error, KeyError) and isinstance(error, ValueError)
    message = str(error)
    assert "Did you mean 'math_accuracy'?" in message
    assert all(name in message for name in EXPECTED)
    assert not message.startswith(("'", '"'))  # KeyError's quoting is undone
    with pytest.raises(KeyError):
        rewards.reward_params("nope")


def test_unknown_param_names_the_reward_the_param_and_the_allowed_ones():
    with pytest.raises(InvalidRewardParamsError) as caught:
        get_reward("numeric_accuracy", last_number=False)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert (
        "'numeric_accuracy'" in message and "'last_number'" in message and "last_number_fallback" in message
    )
    assert "Did you mean 'last_number_fallback'?" in message


@pytest.mark.parametrize(
    ("name", "params", "fragment"),
    [
        ("math_accuracy", {"timeout_seconds": "slow"}, "timeout_seconds"),
        ("math_accuracy", {"answer_format": "latex"}, "'boxed'"),
        ("math_accuracy", {"timeout_seconds": 0}, "timeout_seconds must be > 0"),
        ("repetition_penalty", {"ngram_size": True}, "ngram_size"),  # a bool is not an int
        ("repetition_penalty", {"max_penalty": 0.5}, "max_penalty must be <= 0"),
        ("soft_overlong", {}, "max_completion_length"),
        ("soft_overlong", {"max_completion_length": 10, "cache_length": 20}, "cache_length"),
        ("countdown", {"format_score": 2}, "format_score"),
        ("cosine_length", {"max_length": 10, "accuracy": "think_format"}, "not an accuracy reward"),
        ("cosine_length", {"max_length": 10, "accuracy": "nope"}, "unknown reward"),
        ("cosine_length", {"max_length": 10, "accuracy_params": {"bogus": 1}}, "bogus"),
        ("think_format", {"strict": "yes"}, "strict"),
    ],
)
def test_bad_params_raise_clear_errors(name, params, fragment):
    with pytest.raises((TypeError, ValueError)) as caught:
        get_reward(name, **params)
    assert fragment in str(caught.value)
    assert f"'{name}'" in str(caught.value) or "unknown reward" in str(caught.value)


@pytest.mark.parametrize(
    ("name", "params", "param", "problem"),
    [
        ("math_accuracy", {"timeout_seconds": "slow"}, "timeout_seconds", "expected a number, got 'slow'."),
        (
            "math_accuracy",
            {"answer_format": "box"},
            "answer_format",
            "got 'box'; allowed: boxed, answer_tag.",
        ),
        ("math_accuracy", {"num_workers": 1.0}, "num_workers", "expected an integer, got 1.0."),
        (
            "soft_overlong",
            {"max_completion_length": 9, "cache_length": "x"},
            "cache_length",
            "expected an integer or null, got 'x'.",
        ),
        ("soft_overlong", {}, "max_completion_length", "missing required key (an integer)."),
        (
            "cosine_length",
            {"max_length": 9, "accuracy_params": [1]},
            "accuracy_params",
            "expected a mapping or null, got [1].",
        ),
        ("think_format", {"strict": 1}, "strict", "expected true or false, got 1."),
    ],
)
def test_a_bad_param_names_the_reward_the_param_and_the_allowed_ones(name, params, param, problem):
    with pytest.raises(InvalidRewardParamsError) as caught:
        get_reward(name, **params)
    error = caught.value
    assert (error.reward, error.param) == (name, param) and error.problem.startswith(problem)
    assert str(error).startswith(f"reward {name!r} parameter {param!r}: {problem}")
    assert "Allowed parameters: " in str(error) and "\n" not in str(error)
    assert pickle.loads(pickle.dumps(error)).args == error.args


def test_ints_and_numeric_strings_are_accepted_for_float_params():
    assert get_reward("math_accuracy", timeout_seconds=2).timeout_seconds == 2.0
    # YAML 1.1 reads `1e-1` (an exponent without a dot) as a string: the same convention as the recipe.
    assert get_reward("math_accuracy", timeout_seconds="1e-1").timeout_seconds == 0.1


def test_construction_is_cheap_and_starts_no_process():
    starts = POOL.counters["worker_starts"]
    began = time.perf_counter()
    for _ in range(20):
        for name in EXPECTED:
            build(name)
    assert time.perf_counter() - began < 1.0  # 200 constructions
    assert POOL.counters["worker_starts"] == starts


def test_trl_calling_convention_accepts_and_ignores_extra_keywords():
    logged: dict[str, list] = {}
    metrics: list = []
    reward = get_reward("numeric_accuracy")
    scores = reward(
        prompts=[[{"role": "user", "content": "2+2?"}]] * 2,
        completions=[[{"role": "assistant", "content": "4"}], [{"role": "assistant", "content": "5"}]],
        completion_ids=[[1, 2], [3]],
        solution=["4", "4"],
        question=["2+2?", "2+2?"],
        trainer_state=object(),
        log_extra=lambda column, values: logged.setdefault(column, values),
        log_metric=lambda name, value: metrics.append((name, value)),
        environments=None,
    )
    assert scores == [1.0, 0.0]
    assert logged == {"numeric_accuracy/gold": ["4", "4"], "numeric_accuracy/answer": ["4", "5"]}


def test_missing_or_malformed_columns_are_caller_errors():
    reward = get_reward("math_accuracy")
    with pytest.raises(ValueError, match="'solution'"):
        reward(["\\boxed{1}"])
    with pytest.raises(ValueError, match="one value per completion"):
        reward(["\\boxed{1}", "\\boxed{2}"], solution="12")  # a string is not a column
    with pytest.raises(ValueError, match="2 completions"):
        reward(["\\boxed{1}", "\\boxed{2}"], solution=["1"])


def test_register_adds_a_reward_in_one_decorated_class(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @register("contains_42")
    class Contains42(Reward):
        """1.0 when the completion mentions 42."""

        def __init__(self, *, bonus: float = 1.0) -> None:
            self.bonus = bonus

        def score(self, sample: Sample) -> float:
            return self.bonus if "42" in sample.text else 0.0

    assert "contains_42" in rewards.available_rewards()
    assert rewards.reward_params("contains_42") == {"bonus": 1.0}
    assert get_reward("contains_42", bonus=2)(["it is 42", "no"]) == [2.0, 0.0]
    with pytest.raises(InvalidRewardParamsError, match="bonus"):
        get_reward("contains_42", bonus="big")


def test_register_rejects_what_would_break_the_conventions(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    class Positional(Reward):
        def __init__(self, strict: bool = False) -> None:
            self.strict = strict

    with pytest.raises(TypeError, match="keyword-only"):
        register("positional")(Positional)
    with pytest.raises(TypeError, match="Reward subclasses"):
        register("function")(lambda completions, **kwargs: [])
    with pytest.raises(ValueError, match="already registered"):
        register("math_accuracy")(type("Other", (Reward,), {}))


def test_a_bug_tripped_by_one_completion_costs_that_completion_only(monkeypatch):
    reward = get_reward("think_format")
    original = type(reward).score

    def sometimes_broken(sample):
        if "boom" in sample.text:
            raise RuntimeError("bug")
        return original(reward, sample)

    monkeypatch.setattr(reward, "score", sometimes_broken)
    good = "<think>a</think><answer>b</answer>"
    assert reward([good, "boom", good]) == [1.0, 0.0, 1.0]


def test_setup_errors_are_raised_not_scored(monkeypatch):
    reward = get_reward("think_format")

    def unusable(sample):
        raise rewards.RewardSetupError("math-verify is not installed")

    monkeypatch.setattr(reward, "score", unusable)
    with pytest.raises(rewards.RewardSetupError):
        reward(["x"])


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_import_is_fast_and_imports_no_heavy_library():
    code = (
        "import sys, time; began = time.perf_counter(); import rewards; took = time.perf_counter() - began; "
        "heavy = sorted(m for m in ('torch', 'transformers', 'trl', 'sympy', 'math_verify', "
        "'latex2sympy2_extended', 'numpy') if m in sys.modules); print(took, ','.join(heavy))"
    )
    timings = []
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
        timings.append(float(out[0]))
        assert len(out) == 1, f"import rewards pulled in {out[1]}"
    assert min(timings) < 0.3, timings
