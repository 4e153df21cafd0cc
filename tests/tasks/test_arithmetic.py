import ast
import operator

from grpo_recipes.tasks import GENERATORS
from grpo_recipes.tasks.arithmetic import _evaluate, arithmetic

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def python_precedence(expression: str) -> int:
    """Evaluate with Python's own parser for precedence (an independent check; no eval)."""

    def walk(node):
        if isinstance(node, ast.BinOp):
            return OPS[type(node.op)](walk(node.left), walk(node.right))
        assert isinstance(node, ast.Constant) and isinstance(node.value, int)
        return node.value

    return walk(ast.parse(expression, mode="eval").body)


def test_precedence_products_before_sums():
    assert _evaluate([2, 2, 6], ["+", "*"]) == 14
    assert _evaluate([2, 3, 4, 5], ["*", "-", "*"]) == -14
    assert _evaluate([9, 3, 9], ["+", "-"]) == 3


def test_answers_match_an_independent_evaluation():
    for row in arithmetic(300, seed=3, max_ops=3):
        assert str(python_precedence(row["question"].replace("×", "*"))) == row["answer"]


def test_deterministic_distinct_and_held_out():
    gen = GENERATORS["arithmetic"]
    train, held_out = gen.splits(500, 100, seed=7)
    again, _ = gen.splits(500, 100, seed=7)
    assert train == again
    questions = [r["question"] for r in train]
    assert len(set(questions)) == len(questions) == 500
    assert not set(questions) & {r["question"] for r in held_out}


def test_difficulty_knob_sets_operator_count():
    rows = arithmetic(50, seed=0, min_ops=3, max_ops=3)
    assert all(len(r["question"].split()) == 7 for r in rows)


def test_asking_for_more_problems_than_exist_is_an_error():
    import pytest

    with pytest.raises(ValueError, match="only"):
        arithmetic(500, seed=0, max_ops=1, operators="+")
    # An operator written twice adds no problem: 2 and 3 with "+" make 4, asking for 6 is an error, not a
    # search for distinct problems that never ends.
    assert GENERATORS["arithmetic"].capacity(max_ops=1, min_operand=2, max_operand=3, operators="++") == 4
    with pytest.raises(ValueError, match="allow only 4"):
        arithmetic(6, seed=0, max_ops=1, min_operand=2, max_operand=3, operators="++")
    assert len(arithmetic(4, seed=0, max_ops=1, min_operand=2, max_operand=3, operators="++")) == 4


def test_params_are_type_checked_from_the_signature_then_range_checked():
    import pytest

    from rewards.typecheck import FieldError

    gen = GENERATORS["arithmetic"]
    assert gen.check_params({"max_ops": 3, "times_symbol": "*"}) == {"max_ops": 3, "times_symbol": "*"}
    for params, message in [
        ({"max_ops": "two"}, "max_ops: expected an integer, got 'two'."),
        ({"max_ops": True}, "max_ops: expected an integer, got True."),
        ({"times_symbol": "·"}, "times_symbol: got '·'; allowed: ×, *, x."),
        ({"max_opps": 3}, "unknown key 'max_opps'. Allowed: min_ops, max_ops"),
        ({"min_ops": 3}, "need 1 <= min_ops <= max_ops <= 6, got min_ops=3, max_ops=2."),  # max_ops' default
        ({"min_operand": 5, "max_operand": 4}, "need 0 <= min_operand <= max_operand, got 5, 4."),
        ({"operators": "+/"}, "operators: must be a non-empty string of + - *, got '+/'."),
    ]:
        with pytest.raises(FieldError) as caught:
            gen.check_params(params)
        assert str(caught.value).startswith(message), str(caught.value)
