"""Greedy accuracy on held-out prompts, scored by the same reward functions that train the model."""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

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
    correct_by_problem: list[bool] = field(default_factory=list)
    """Whether each held-out problem, in order, was answered right: for paired comparisons of two runs."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _render(prompt: Any, tokenizer, chat_template_kwargs: dict[str, Any]) -> str:
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=True, **chat_template_kwargs
    )


def greedy_accuracy(model, tokenizer, dataset, recipe: Recipe, log=print, accelerator=None) -> EvalResult:
    """Generate greedily for every row of `dataset` (with `prompt` and `solution` columns) and score it.

    A row is correct when the recipe's evaluation reward gives it at least 1.0 (full marks). With an
    `accelerator` (several processes), each process generates for its share of the rows on its own device
    and every process returns the gathered result. Under ZeRO-3 the weights are gathered for generation;
    under FSDP every process steps through generation together (`synced_gpus`) on equal shares.
    """
    import torch

    score = recipe.evaluation_function
    max_new = recipe.evaluation.max_new_tokens or recipe.trainer.get("max_completion_length", 256)
    chat_kwargs = recipe.trainer.get("chat_template_kwargs") or {}
    batch_size = recipe.evaluation.batch_size
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    fsdp = accelerator is not None and getattr(accelerator.state, "fsdp_plugin", None) is not None
    share = list(range(rank, len(dataset), world))
    if fsdp:  # lock-step generation needs the same number of batches everywhere: pad with a repeat
        share += share[-1:] * (math.ceil(len(dataset) / world) - len(share))
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # decoder-only generation continues from the right edge
    start, results = time.time(), []
    columns = [c for c in dataset.column_names if c != "prompt"]
    try:
        with _generation_model(model, accelerator) as policy:
            device = next(policy.parameters()).device
            for begin in range(0, len(share), batch_size):
                indices = share[begin : begin + batch_size]
                rows = dataset.select(indices)
                texts = [_render(p, tokenizer, chat_kwargs) for p in rows["prompt"]]
                enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
                with torch.no_grad():
                    out = policy.generate(
                        **enc,
                        max_new_tokens=max_new,
                        do_sample=False,
                        pad_token_id=tokenizer.pad_token_id,
                        synced_gpus=fsdp,
                    )
                completions = tokenizer.batch_decode(
                    out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
                )
                is_chat = not isinstance(rows["prompt"][0], str)
                batch = (
                    [[{"role": "assistant", "content": c}] for c in completions] if is_chat else completions
                )
                scores = score(batch, prompts=rows["prompt"], **{c: rows[c] for c in columns})
                for index, completion, solution, value in zip(
                    indices, completions, rows["solution"], scores, strict=True
                ):
                    results.append((index, completion, str(solution), value is not None and value >= 1.0))
                done = sum(r[3] for r in results)
                log(
                    f"  evaluated {min(begin + len(indices), len(share))}/{len(share)} on this process: {done} correct"
                )
    finally:
        tokenizer.padding_side = side
    if world > 1:
        from accelerate.utils import gather_object

        results = gather_object(results)
    by_index = {
        index: (completion, solution, ok) for index, completion, solution, ok in results
    }  # drops pads
    correct = sum(ok for _, _, ok in by_index.values())
    examples = [
        {"completion": c, "solution": s, "correct": bool(ok)}
        for _, (c, s, ok) in sorted(by_index.items())[:8]
    ]
    total = len(dataset)
    low, high = wilson_interval(correct, total)
    by_problem = [bool(ok) for _, (_, _, ok) in sorted(by_index.items())]
    return EvalResult(
        correct, total, correct / max(total, 1), low, high, time.time() - start, examples, by_problem
    )


@contextlib.contextmanager
def _generation_model(model, accelerator):
    """The model to call `generate` on, in eval mode: unwrapped, with ZeRO-3 weights gathered (TRL's helper)."""
    if accelerator is None:
        context = contextlib.nullcontext(model)
    else:
        from trl.models.utils import unwrap_model_for_generation

        context = unwrap_model_for_generation(model, accelerator)
    with context as policy:
        was_training = policy.training
        policy.eval()
        try:
            yield policy
        finally:
            policy.train(was_training)
