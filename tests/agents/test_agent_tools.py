"""The guard every tool call goes through, and the tool registry (shipped names, import paths, params)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import user_tools
from transformers.utils import get_json_schema

from grpo_recipes.agents import TOOLS, ToolError, ToolStats, get_tool, guard, register_tool
from grpo_recipes.agents.tools import build_tool, result_text, tool_schema_problems


def divide(a: int, b: int = 1) -> float:
    """Divide two numbers.

    Args:
        a: The dividend.
        b: The divisor.
    """
    return a / b


def echo(text: str, times: int = 1) -> str:
    """Repeat a text.

    Args:
        text: What to repeat.
        times: How many times.
    """
    return text * times


def blocked(seconds: float) -> str:
    """Block until released or `seconds` pass.

    Args:
        seconds: The most to wait.
    """
    user_tools.RELEASE.wait(seconds)
    return "finished"


@pytest.fixture
def release():
    """Blocked tools return when the test ends, so that their threads do not linger."""
    user_tools.RELEASE.clear()
    yield
    user_tools.RELEASE.set()


# ----------------------------------------------------------------------------------------------------------
# The guard
# ----------------------------------------------------------------------------------------------------------


def test_a_result_passes_through_and_is_counted():
    stats = ToolStats()
    guarded = guard(divide, stats=stats)
    assert guarded(a=6, b=3) == "2.0"  # not a string: JSON-encoded
    assert guarded(7, 2) == "3.5"
    assert stats.as_dict() == {"calls": 2, "failures": 0, "timeouts": 0, "truncated": 0}


@pytest.mark.parametrize(
    "error, expected",
    [
        (ValueError("bad value"), "Error: ValueError: bad value"),
        (KeyError("key"), "Error: KeyError: 'key'"),
        (RuntimeError("two\nlines\n\tand  spaces"), "Error: RuntimeError: two lines and spaces"),
        (ZeroDivisionError(), "Error: ZeroDivisionError: ZeroDivisionError"),
        (SystemExit(3), "Error: SystemExit: 3"),  # not only Exception: nothing a tool raises escapes
        (KeyboardInterrupt(), "Error: KeyboardInterrupt: KeyboardInterrupt"),
        (ToolError("", "said to the model as it is"), "Error: said to the model as it is"),
    ],
)
def test_an_exception_becomes_one_line_of_error_text(error, expected):
    def fails(x: int) -> str:
        """Fail.

        Args:
            x: Ignored.
        """
        raise error

    stats = ToolStats()
    assert guard(fails, stats=stats)(x=1) == expected
    assert stats.as_dict() == {"calls": 1, "failures": 1, "timeouts": 0, "truncated": 0}


def test_a_long_error_message_is_cut_to_one_short_line():
    def fails(x: int) -> str:
        """Fail.

        Args:
            x: Ignored.
        """
        raise ValueError("word\n" * 1000)

    text = guard(fails)(x=1)
    assert text.startswith("Error: ValueError: word word") and text.endswith("...")
    assert "\n" not in text and len(text) < 400


def test_a_call_that_does_not_finish_in_time_is_abandoned_and_counted(release):
    stats = ToolStats()
    guarded = guard(blocked, timeout_seconds=0.2, stats=stats)
    start = time.monotonic()
    assert guarded(seconds=30) == "Error: blocked did not finish within 0.2 s"
    assert time.monotonic() - start < 5
    assert guarded(seconds=0) == "finished"  # the next call is not held up by the abandoned one
    assert stats.as_dict() == {"calls": 2, "failures": 1, "timeouts": 1, "truncated": 0}


def test_a_long_result_is_cut_with_a_marker_and_counted():
    stats = ToolStats()
    guarded = guard(echo, max_result_chars=50, stats=stats)
    text = guarded(text="abcde", times=100)
    assert text == ("abcde" * 10)[:34] + "\n[... cut: 500 characters in all ...]\n" + ("abcde" * 10)[-16:]
    assert guarded(text="x", times=50) == "x" * 50  # exactly the limit: kept whole
    assert stats.as_dict() == {"calls": 2, "failures": 0, "timeouts": 0, "truncated": 1}


@pytest.mark.parametrize(
    "args, kwargs, expected",
    [
        ((), {}, "Error: bad arguments for divide: missing a required argument: 'a'"),
        ((), {"a": 1, "c": 2}, "Error: bad arguments for divide: got an unexpected keyword argument 'c'"),
        ((1, 2, 3), {}, "Error: bad arguments for divide: too many positional arguments"),
        ((1,), {"a": 1}, "Error: bad arguments for divide: multiple values for argument 'a'"),
    ],
)
def test_arguments_that_do_not_fit_the_signature_are_an_error_not_an_exception(args, kwargs, expected):
    stats = ToolStats()
    assert guard(divide, stats=stats)(*args, **kwargs) == expected
    assert stats.as_dict() == {"calls": 1, "failures": 1, "timeouts": 0, "truncated": 0}


def test_an_argument_of_the_wrong_type_reaches_the_tool_and_its_error_is_text():
    assert guard(divide)(a="6", b=2) == "Error: TypeError: unsupported operand type(s) for /: 'str' and 'int'"


@pytest.mark.parametrize(
    "value, text",
    [
        ("as it is", "as it is"),
        ("", ""),
        (42, "42"),
        (2.5, "2.5"),
        (True, "true"),
        (None, "null"),
        ([1, "two", None], '[1, "two", null]'),
        ({"city": "Zürich", "temp": 21}, '{"city": "Zürich", "temp": 21}'),  # not \u-escaped
        ({"when": Path("/x")}, '{"when": "/x"}'),  # what JSON cannot hold, as text
    ],
)
def test_non_string_results_are_json(value, text):
    def give() -> object:
        """Give a value."""
        return value

    assert guard(give)() == text == result_text(value)
    if not isinstance(value, str) and not isinstance(value, dict):
        assert json.loads(text) == value


def test_the_guarded_tool_is_described_to_the_model_exactly_as_the_original():
    for tool in (divide, echo, get_tool("calculator").__wrapped__, user_tools.convert):
        guarded = guard(tool)
        assert guarded.__name__ == tool.__name__ and guarded.__doc__ == tool.__doc__
        assert get_json_schema(guarded) == get_json_schema(tool)
    # Postponed annotations of the user's module, with a typing name only it imports, still resolve.
    schema = get_json_schema(guard(user_tools.convert))["function"]["parameters"]
    assert schema["properties"]["unit"] == {
        "type": "string",
        "enum": ["cm", "in"],
        "description": "The unit `value` is in.",
    }
    assert schema["required"] == ["value", "unit"]


def test_counts_are_exact_when_tools_run_from_many_threads(release):
    stats = ToolStats()
    guarded = guard(divide, stats=stats)
    slow = guard(blocked, timeout_seconds=0.05, stats=stats)

    def work():
        for i in range(20):
            guarded(a=i, b=0 if i % 4 == 0 else 1)  # 5 failures of 20
        slow(seconds=30)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stats.as_dict() == {"calls": 8 * 21, "failures": 8 * 6, "timeouts": 8, "truncated": 0}


def test_a_shared_stats_object_counts_every_tool():
    stats = ToolStats()
    calculator = get_tool("calculator", stats=stats)
    guarded = guard(echo, max_result_chars=3, stats=stats)
    calculator(expression="1 / 0"), calculator(expression="2 + 2"), guarded(text="long text")
    assert stats.as_dict() == {"calls": 3, "failures": 1, "timeouts": 0, "truncated": 1}


# ----------------------------------------------------------------------------------------------------------
# The registry
# ----------------------------------------------------------------------------------------------------------


def test_shipped_tools_by_name_with_params():
    assert {"calculator", "python"} <= set(TOOLS)
    calculator = get_tool("calculator", {"max_length": 10})
    assert calculator.__name__ == "calculator"
    assert calculator(expression="1 + 2") == "3"
    assert calculator(expression="1 + 2 + 3 + 4") == "Error: the expression is longer than 10 characters"


@pytest.mark.parametrize(
    "params, key, problem",
    [
        (
            {"max_lenght": 10},
            "params",
            "unknown key 'max_lenght'. Allowed: max_length. Did you mean 'max_length'?",
        ),
        ({"max_length": "long"}, "params.max_length", "expected an integer, got 'long'"),
        ({"max_length": [1]}, "params.max_length", "expected an integer"),
    ],
)
def test_shipped_tool_params_are_checked(params, key, problem):
    with pytest.raises(ToolError) as caught:
        build_tool("calculator", params)
    assert caught.value.key == key and problem in caught.value.problem


def test_python_tool_params_are_checked_before_any_sandbox_starts():
    with pytest.raises(ToolError) as caught:
        build_tool("python", {"timeout_seconds": "ten"})
    assert caught.value.key == "params.timeout_seconds"


def test_a_users_function_by_import_path_is_the_tool_guarded():
    stats = ToolStats()
    convert = get_tool("user_tools:convert", stats=stats)
    assert convert.__wrapped__ is user_tools.convert
    assert convert(value=2, unit="in") == "5.08 cm"
    assert convert(value=2) == "Error: bad arguments for convert: missing a required argument: 'unit'"
    assert stats.as_dict()["calls"] == 2 and stats.as_dict()["failures"] == 1


@pytest.mark.parametrize(
    "name, params, key, problem",
    [
        ("calculater", {}, "name", "unknown tool 'calculater'. Shipped: calculator, python;"),
        ("my tools:f", {}, "name", "is neither a known name nor an import path"),
        ("user_tools:", {}, "name", "is neither a known name nor an import path"),
        (
            "no_such_module_for_tools:f",
            {},
            "name",
            "cannot import no_such_module_for_tools (looked in",
        ),
        ("user_tools:missing", {}, "name", "has no attribute 'missing'"),
        ("user_tools:NotAFunction", {}, "name", "user_tools:NotAFunction is not a function"),
        ("user_tools:RELEASE", {}, "name", "user_tools:RELEASE is not a function"),
        (
            "user_tools:convert",
            {"unit": "cm"},
            "params",
            "a tool given by import path takes no params (got unit)",
        ),
        ("user_tools:undocumented", {}, "name", "it has no docstring"),
        ("user_tools:unannotated", {}, "name", "parameter 'x' has no type annotation"),
    ],
)
def test_tools_that_cannot_be_used_are_tool_errors_naming_the_key(name, params, key, problem):
    with pytest.raises(ToolError) as caught:
        get_tool(name, params)
    assert caught.value.key == key and problem in caught.value.problem, caught.value
    assert "\n" not in str(caught.value)


def test_a_module_that_fails_to_import_is_named_with_its_error(tmp_path, monkeypatch):
    (tmp_path / "broken_tools_module.py").write_text("raise RuntimeError('no config\\nfound')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ToolError) as caught:
        build_tool("broken_tools_module:f")
    assert caught.value.key == "name"
    assert caught.value.problem == "importing broken_tools_module failed: RuntimeError: no config found"


def test_schema_problems_list_every_gap():
    def gaps(a: int, b, *args, **kwargs) -> int:
        """Something.

        Args:
            a (int): Described, with a type in parentheses.
        """

    assert tool_schema_problems(gaps) == [
        "parameter 'b' has no type annotation",
        "parameter 'b' is not described under Args: in the docstring",
    ]
    assert tool_schema_problems(user_tools.undocumented) == [
        "it has no docstring (the model reads it as the tool's description)",
        "parameter 'x' is not described under Args: in the docstring",
    ]
    assert tool_schema_problems(divide) == tool_schema_problems(user_tools.convert) == []


def test_a_registered_factory_becomes_a_shipped_tool(monkeypatch):
    monkeypatch.setitem(TOOLS, "repeat", None)  # removed again after the test

    @register_tool("repeat")
    def repeat_tool(times: int = 2):
        def repeat(text: str) -> str:
            """Repeat a text.

            Args:
                text: What to repeat.
            """
            return text * times

        return repeat

    assert TOOLS["repeat"] is repeat_tool
    assert get_tool("repeat", {"times": 3})(text="ab") == "ababab"
    with pytest.raises(ToolError, match="unknown key 'count'"):
        build_tool("repeat", {"count": 3})
