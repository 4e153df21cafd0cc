"""A user copies the calculator recipe, swaps in a tool of their own by import path, and it trains.

`scripts/train.py` as a user runs it, on the tiny model: the warm-up's demonstrations call the user's tool
for real (it counts its calls in a file), GRPO runs two steps with the tool offered, the held-out evaluation
runs multi-turn rollouts, and the run folder records the warm-up and the tool metrics.
"""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml
from support import REPO, run_script

pytestmark = pytest.mark.slow

USER_MODULE = '''
import os


def shout(text: str) -> str:
    """Repeat a text in capitals.

    Args:
        text: The text to shout.
    """
    with open(os.environ["SHOUT_CALLS"], "a") as calls:
        calls.write(text + "\\n")
    return text.upper()
'''


def test_a_copied_tool_recipe_trains_with_a_users_own_tool(tiny_model, tmp_path):
    (tmp_path / "user_shout_tools.py").write_text(textwrap.dedent(USER_MODULE))
    recipe = yaml.safe_load((REPO / "recipes" / "calculator-cpu.yaml").read_text())
    recipe["model"]["name_or_path"] = str(tiny_model)
    recipe["dataset"]["generator"].update(train_size=16, eval_size=4)
    recipe["tools"] = [{"name": "user_shout_tools:shout", "timeout_seconds": 2}]
    recipe["warmup"].update(
        examples=4,
        max_steps=2,
        per_device_train_batch_size=2,
        where={},
        calls=[{"tool": "shout", "arguments": {"text": "{question}"}}],
    )
    recipe["evaluation"].update(max_samples=4, max_new_tokens=24, batch_size=4)
    recipe["trainer"].update(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        save_steps=2,
        max_completion_length=24,
        per_device_train_batch_size=4,
    )
    path = tmp_path / "my-tool-recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    calls = tmp_path / "calls.txt"

    result = run_script(
        "train.py",
        "--config",
        str(path),
        timeout=600,
        extra_env={"PYTHONPATH": str(tmp_path), "SHOUT_CALLS": str(calls)},
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]

    # The warm-up's 4 demonstrations called the user's tool with the rows' questions.
    called = calls.read_text().splitlines()
    assert len(called) >= 4 and all(any(ch.isdigit() for ch in line) for line in called[:4])
    out = tmp_path / "out"
    info = json.loads((out / "run_info.json").read_text())
    assert info["warmup"]["steps"] == 2 and info["warmup"]["examples"] == 4
    history = [h for h in json.loads((out / "log_history.json").read_text()) if "reward" in h]
    assert [h["step"] for h in history] == [1, 2]
    assert all(
        "tools/call_frequency" in h and "tools/failures" in h and "tools/timeouts" in h for h in history
    )
    # The held-out evaluation ran rollouts with the tool offered: its samples carry conversations.
    samples = [json.loads(line) for line in (out / "eval_after_samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 and all("messages" in s and "tool_calls" in s for s in samples)
    assert "warm-up: 4 demonstrations, 2 supervised steps" in log
