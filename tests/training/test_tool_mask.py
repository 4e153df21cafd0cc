"""The loss never sees tool-result tokens: a real batch of the trainer, with completions that call the calculator.

The tiny model's `generate` is scripted (a random model writes no tool call): the first turn calls the
calculator, the second answers, some rightly and some not, so the group's advantages are not all zero. The
batch goes through TRL's own tool loop and loss; the gradient the loss sends to each position's prediction is checked
position by position: zero wherever a token is the tool's result, and non-zero on the model's own turns.
"""

from __future__ import annotations

import pytest
import torch

from grpo_recipes.agents import ToolStats, get_tool
from grpo_recipes.agents.templates import apply_chat_template_choice

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "123 * 45"}}\n</tool_call><|im_end|>'
ANSWERS = ["The answer is 5535.<|im_end|>", "The answer is 5000.<|im_end|>"]


def scripted_generate(tokenizer, model):
    """`model.generate` replaced: a tool call first, then (after the tool's result) one of two answers."""
    calls = {"answers": 0}
    response_marker = tokenizer.encode("<tool_response>", add_special_tokens=False)

    def generate(input_ids=None, attention_mask=None, **kwargs):
        rows = []
        for ids in input_ids.tolist():
            text_ids = [i for i in ids if i != tokenizer.pad_token_id]
            seen_result = any(
                text_ids[j : j + len(response_marker)] == response_marker for j in range(len(text_ids))
            )
            if seen_result:
                reply = ANSWERS[calls["answers"] % 2]
                calls["answers"] += 1
            else:
                reply = CALL
            rows.append(tokenizer.encode(reply, add_special_tokens=False))
        width = max(len(r) for r in rows)
        pad = tokenizer.pad_token_id
        new = torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=input_ids.dtype)
        return torch.cat([input_ids, new.to(input_ids.device)], dim=1)

    model.generate = generate
    return calls


@pytest.fixture
def trainer(tiny_model, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    import rewards
    from grpo_recipes.training.trainer import RecipeGRPOTrainer

    tokenizer = apply_chat_template_choice(AutoTokenizer.from_pretrained(tiny_model), "qwen2_5")
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    rows = [
        {
            "prompt": [
                {"role": "system", "content": "Use the calculator."},
                {"role": "user", "content": "What is 123 * 45?"},
            ],
            "solution": "5535",
        }
    ] * 4
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=96,
        max_tool_calling_iterations=2,
        use_cpu=True,
        bf16=False,
        report_to="none",
        beta=0.0,
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
        activation_checkpointing=False,
    )
    stats = ToolStats()
    built = RecipeGRPOTrainer(
        model=model,
        reward_funcs=[rewards.get_reward("numeric_accuracy")],
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        tools=[get_tool("calculator", stats=stats)],
        tool_stats=stats,
    )
    scripted_generate(tokenizer, built.model)
    return built, tokenizer, rows, stats


def test_tool_results_are_masked_out_of_the_loss_on_a_real_batch(trainer):
    trainer, tokenizer, rows, stats = trainer
    batch = trainer._generate_and_score_completions(rows)
    assert stats.as_dict()["calls"] == 4 and stats.as_dict()["failures"] == 0

    completion_ids, completion_mask, tool_mask = (
        batch["completion_ids"],
        batch["completion_mask"],
        batch["tool_mask"],
    )
    for row in range(len(rows)):
        ids = completion_ids[row][completion_mask[row].bool()].tolist()
        mask = tool_mask[row][completion_mask[row].bool()].tolist()
        masked = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
        kept = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 1])
        # The tool's result (the calculator's 5535) is in the masked tokens, and only there.
        assert "<tool_response>" in masked and "5535" in masked and "</tool_response>" in masked
        assert "tool_response" not in kept and '"calculator"' in kept and "The answer is" in kept
        assert "calculator" not in masked  # the call itself is the model's: trained on

    # Two right and two wrong answers: the advantages are not all zero, so the loss has a gradient.
    assert batch["advantages"].abs().sum() > 0

    # TRL computes log-probabilities with a fused head, so the gradient is read one step before it: on the final
    # norm's output, whose vector at position t feeds only the prediction of token t + 1.
    captured = {}

    def keep_hidden(module, inputs, output):
        output.retain_grad()
        captured["hidden"] = output

    handle = trainer.model.model.norm.register_forward_hook(keep_hidden)
    try:
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this step skips
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
    finally:
        handle.remove()
    prompt_length, length = batch["prompt_ids"].size(1), completion_ids.size(1)
    grad = captured["hidden"].grad[:, prompt_length - 1 : prompt_length - 1 + length].abs().sum(-1)
    on_tool = (tool_mask == 0) & completion_mask.bool()
    on_model = (tool_mask == 1) & completion_mask.bool()
    assert on_tool.any() and on_model.any()
    assert torch.all(grad[on_tool] == 0), "the loss reached a tool-result token"
    assert torch.all(grad[on_model] > 0), "a token of the model's own turns got no gradient"
