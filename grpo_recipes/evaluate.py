"""Greedy accuracy on held-out prompts, scored by the same reward functions that train the model."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import rewards

from .recipe import Recipe


def wilson_interval(correct: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval for a proportion; sound at 0 % and 100 % where the normal one is not.

    >>> [round(x, 3) for x in wilson_interval(29, 100)]
    [0.21, 0.385]
    """
    if total == 0:
        return (0.0, 1.0)
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass
class EvalResult:
    correct: int
    total: int
    accuracy: float
    ci_low: float
    ci_high: float
    seconds: float
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _render(prompt: Any, tokenizer, chat_template_kwargs: dict[str, Any]) -> str:
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=True, **chat_template_kwargs
    )


def greedy_accuracy(model, tokenizer, dataset, recipe: Recipe, log=print) -> EvalResult:
    """Generate greedily for every row of `dataset` (with `prompt` and `solution` columns) and score it.

    A row is correct when the recipe's evaluation reward gives it at least 1.0 (full marks).
    """
    import torch

    spec = recipe.evaluation_reward
    score = rewards.get_reward(spec.name, **spec.params)
    max_new = recipe.evaluation.max_new_tokens or recipe.trainer.get("max_completion_length", 256)
    chat_kwargs = recipe.trainer.get("chat_template_kwargs") or {}
    batch_size = recipe.evaluation.batch_size
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # decoder-only generation continues from the right edge
    start, correct, examples = time.time(), 0, []
    columns = [c for c in dataset.column_names if c != "prompt"]
    try:
        for begin in range(0, len(dataset), batch_size):
            rows = dataset.select(range(begin, min(begin + batch_size, len(dataset))))
            texts = [_render(p, tokenizer, chat_kwargs) for p in rows["prompt"]]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            with torch.no_grad():
                out = model.generate(
                    **enc, max_new_tokens=max_new, do_sample=False, pad_token_id=tokenizer.pad_token_id
                )
            completions = tokenizer.batch_decode(
                out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
            )
            is_chat = not isinstance(rows["prompt"][0], str)
            batch = [[{"role": "assistant", "content": c}] for c in completions] if is_chat else completions
            kwargs = {c: rows[c] for c in columns}
            scores = score(batch, prompts=rows["prompt"], **kwargs)
            for completion, solution, value in zip(completions, rows["solution"], scores, strict=True):
                ok = value is not None and value >= 1.0
                correct += ok
                if len(examples) < 8:
                    examples.append(
                        {"completion": completion, "solution": str(solution), "correct": bool(ok)}
                    )
            log(f"  evaluated {begin + len(rows)}/{len(dataset)}: {correct} correct")
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    total = len(dataset)
    low, high = wilson_interval(correct, total)
    return EvalResult(correct, total, correct / max(total, 1), low, high, time.time() - start, examples)
