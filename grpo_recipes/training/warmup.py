"""The supervised warm-up: a few steps of supervised training on demonstrations, before GRPO, in the same run.

GRPO can only reinforce what the model samples. A small model rarely calls a tool on its own, and SmolLM2-135M
never writes a minus sign on "3 - 9"; the warm-up shows it. It trains the policy in place for
`warmup.max_steps` steps on `warmup.examples` demonstrations built from the training rows
(grpo_recipes.agents.demonstrations): the recipe's tool calls, if any, then the answer filled from the row. The
loss is on the assistant's tokens only (the calls and the answer), never on the prompt or the tool results. It
trains what GRPO then trains: the LoRA adapter where the recipe has one (train.py adds it before the warm-up),
else all weights.

It is a plain loop on each process, with the same seed and data everywhere, before the trainer wraps the model,
so it gives every process the same weights under DDP, ZeRO or FSDP. It needs no collective, except under
ZeRO-3 with `zero3_init_flag`, where the model comes out of `from_pretrained` already partitioned (each process
holds a shard of every weight): the weights are gathered for the warm-up and partitioned again after it
(`full_weights`). A run resumed from a GRPO checkpoint skips it (the checkpoint holds the warmed-up weights).
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Iterator
from typing import Any

from ..agents.demonstrations import demonstration
from ..recipe import Recipe, RecipeError
from ..toolset import Toolset

IGNORE = -100


def demonstrations(recipe: Recipe, rows, toolset: Toolset) -> list[dict[str, Any]]:
    """The warm-up conversations for the first `warmup.examples` training rows (cycled when there are fewer)."""
    spec = recipe.warmup
    assert spec is not None
    calls = [(call.tool, call.arguments) for call in spec.calls]
    tools = toolset.by_name()
    chosen = [row for row in rows if all(str(row.get(key)) == value for key, value in spec.where.items())]
    if not chosen:
        raise RecipeError(recipe.source, "warmup.where", f"no training row has {spec.where}.")
    built = []
    for i in range(spec.examples):
        row = chosen[i % len(chosen)]
        try:
            built.append(demonstration(row, calls, spec.answer, tools))
        except (KeyError, IndexError, ValueError) as err:
            raise RecipeError(
                recipe.source,
                "warmup",
                f"cannot fill a demonstration from the row: {type(err).__name__}: {err}",
            ) from None
        # A demonstration of a failing call would teach the model to make it: every call must succeed.
        for message in built[-1]["completion"]:
            if message.get("role") == "tool" and str(message.get("content", "")).startswith("Error:"):
                raise RecipeError(
                    recipe.source,
                    "warmup.calls",
                    f"demonstration {i}'s call to {message.get('name')} returned an error: {message['content'][:300]}",
                )
    return built


def tokenize_demonstration(tokenizer, demo: dict[str, Any], tools: list | None, template_kwargs=None):
    """(input ids, labels) of a demonstration: labels are the ids on the assistant's turns, IGNORE elsewhere.

    The conversation is rendered one turn at a time (consecutive tool results together, as templates group
    them), and each turn's new text is tokenized on its own, so every token belongs to exactly one turn.
    """
    kwargs = {"tools": tools, "tokenize": False, **(template_kwargs or {})}
    messages = list(demo["prompt"])
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, **kwargs)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    labels = [IGNORE] * len(ids)
    completion = demo["completion"]
    k = 0
    while k < len(completion):
        role = completion[k]["role"]
        group = [completion[k]]
        while (
            role == "tool"
            and k + len(group) < len(completion)
            and completion[k + len(group)]["role"] == "tool"
        ):
            group.append(completion[k + len(group)])
        messages += group
        k += len(group)
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=role == "tool", **kwargs)
        if not rendered.startswith(text):
            raise ValueError(
                "the chat template does not render a conversation as a prefix of its continuation"
            )
        piece = tokenizer(rendered[len(text) :], add_special_tokens=False)["input_ids"]
        ids += piece
        labels += piece if role == "assistant" else [IGNORE] * len(piece)
        text = rendered
    return ids, labels


@contextlib.contextmanager
def full_weights(model) -> Iterator[None]:
    """The model's whole weights for the block. Weights partitioned by ZeRO-3 (`ds_id`) are gathered on every
    process (a collective: every process enters) and, after the block, partitioned again from process 0's
    values, which are every process's (the same steps on the same data). Elsewhere it does nothing."""
    partitioned = [p for p in model.parameters() if hasattr(p, "ds_id")]
    if not partitioned:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(partitioned, modifier_rank=0):
        yield


def run_warmup(
    recipe: Recipe, model, tokenizer, demos: list[dict[str, Any]], toolset: Toolset, log=print
) -> dict[str, Any]:
    """Train `model` in place on the demonstrations (`demonstrations`: built before the model loads, so that
    one that cannot be built stops the run first); returns a summary (steps, seconds, losses)."""
    import torch
    from accelerate.utils import is_peft_model
    from transformers.utils import get_json_schema

    spec = recipe.warmup
    assert spec is not None
    schemas = [get_json_schema(tool) for tool in toolset.tools] or None  # no tools: no tool prompt
    template_kwargs = recipe.trainer.get("chat_template_kwargs")
    examples = [tokenize_demonstration(tokenizer, d, schemas, template_kwargs) for d in demos]
    trained = "the LoRA adapter" if is_peft_model(model) else "all weights"
    log(
        f"warm-up: {len(examples)} demonstrations, {spec.max_steps} supervised steps "
        f"(batch {spec.per_device_train_batch_size}, learning rate {spec.learning_rate:g}) on {trained}, "
        "loss on the assistant's tokens"
    )
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    generator = random.Random(int(recipe.trainer.get("seed", 0)))
    torch.manual_seed(int(recipe.trainer.get("seed", 0)))
    with full_weights(model):
        optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=spec.learning_rate
        )
        was_training = model.training
        model.train()
        order: list[int] = []
        losses = []
        start = time.time()
        for step in range(spec.max_steps):
            batch = []
            for _ in range(spec.per_device_train_batch_size):
                if not order:
                    order = list(range(len(examples)))
                    generator.shuffle(order)
                batch.append(examples[order.pop()])
            width = max(len(ids) for ids, _ in batch)
            input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch], device=device)
            labels = torch.tensor([lab + [IGNORE] * (width - len(lab)) for _, lab in batch], device=device)
            attention = torch.tensor(
                [[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch], device=device
            )
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            if step == 0 or (step + 1) % max(1, spec.max_steps // 6) == 0 or step + 1 == spec.max_steps:
                log(f"  warm-up step {step + 1}/{spec.max_steps}: loss {losses[-1]:.4f}")
        model.train(was_training)
        del optimizer
    summary = {
        "examples": len(examples),
        "steps": spec.max_steps,
        "seconds": round(time.time() - start, 1),
        "first_loss": round(losses[0], 4) if losses else None,
        "last_loss": round(losses[-1], 4) if losses else None,
        "device": str(device),  # the policy's: train() places the model on the trainer's device first
    }
    log(f"warm-up done in {summary['seconds']:.0f} s")
    return summary


def write_summary(path, summary: dict[str, Any]) -> None:
    path.write_text(json.dumps(summary, indent=2) + "\n")
