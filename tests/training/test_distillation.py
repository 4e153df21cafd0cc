"""On-policy distillation: a recipe with a `teacher:` selects TRL's DistillationTrainer; its checks, and a tiny
student distilled from a tiny teacher end to end."""

from __future__ import annotations

import json
import math

import pytest
from support import model_stub, run_script, tiny_recipe, write_recipe

from grpo_recipes.recipe import RecipeError, load_recipe
from grpo_recipes.training.train import check, trainer_config


def distill_recipe(student, teacher, out, **trainer) -> dict:
    data = tiny_recipe(student, out, **trainer)
    data["trainer"].pop("num_generations")  # a GRPO setting: one sample a prompt here
    data["teacher"] = {"name_or_path": str(teacher)}
    return data


@pytest.fixture
def stub_recipe(tmp_path):
    """A teacher recipe whose models are config-only folders: it validates, and nothing can load."""

    def write(*overrides: str):
        data = distill_recipe(
            model_stub(tmp_path / "student"), model_stub(tmp_path / "teacher"), tmp_path / "o"
        )
        return load_recipe(write_recipe(tmp_path / "distill.yaml", data), list(overrides))

    return write


def test_a_teacher_selects_the_distillation_trainer_and_its_divergence(stub_recipe):
    recipe = stub_recipe()
    assert recipe.trainer_kind == "distillation"
    config = trainer_config(recipe)
    assert type(config).__name__ == "DistillationConfig" and config.beta == 1.0  # reverse KL by default
    assert trainer_config(stub_recipe("teacher.divergence=forward_kl")).beta == 0.0
    assert trainer_config(stub_recipe("teacher.divergence=jsd")).beta == 0.5
    grpo = stub_recipe("teacher=null", "trainer.num_generations=4")
    assert grpo.trainer_kind == "grpo" and type(trainer_config(grpo)).__name__ == "GRPOConfig"


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        (["trainer.num_generations=4"], "trainer.num_generations", "a GRPOConfig setting, not one of Distil"),
        (["trainer.loss_type=dapo"], "trainer.loss_type", "a GRPOConfig setting"),
        (["trainer.beta=0.0"], "trainer.beta", "set teacher.divergence"),
        (
            ["trainer.teacher_model_name_or_path=x"],
            "trainer.teacher_model_name_or_path",
            "`teacher:` section",
        ),
        (["teacher.divergence=1.5"], "teacher.divergence", "a number from 0 (forward KL) to 1"),
        (["teacher.divergence=kl"], "teacher.divergence", "allowed: reverse_kl, forward_kl, jsd"),
        (["sampling.dynamic=true"], "sampling.dynamic", "not with a teacher"),
        (
            ["teacher.name_or_path=outputs/none", "teacher.build='make train RECIPE=code-cpu'"],
            "teacher.name_or_path",
            "(build it first: make train RECIPE=code-cpu)",
        ),
        (["teacher.name_or_path=./nowhere"], "teacher.name_or_path", "no model folder at"),
        (["teacher.temperature=0.5"], "teacher", "unknown key 'temperature'"),
        (
            ["teacher.samples=teacher", "trainer.use_vllm=true"],
            "teacher.samples",
            "vLLM would hold the student",
        ),
        (["teacher.samples=both"], "teacher.samples", "allowed: student, teacher"),
        (
            ["teacher.estimator=sampled_token", "teacher.divergence=forward_kl"],
            "teacher.estimator",
            "it needs teacher.divergence: reverse_kl and teacher.samples: student",
        ),
        (
            ["teacher.estimator=sampled_token", "teacher.samples=teacher"],
            "teacher.estimator",
            "(got reverse_kl, teacher)",
        ),
        (["teacher.estimator=one_hot"], "teacher.estimator", "it needs teacher.samples: teacher"),
    ],
)
def test_teacher_recipe_mistakes_name_their_key(stub_recipe, overrides, key, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no outputs/ folder here, as on a fresh clone
    with pytest.raises(RecipeError) as err:
        stub_recipe(*overrides)
    assert f": {key}: " in str(err.value) and says in str(err.value), str(err.value)


def test_a_grpo_recipe_refuses_the_teachers_trainer_keys(stub_recipe):
    with pytest.raises(
        RecipeError, match=r"trainer\.teacher_model_revision: the teacher is set in the recipe's"
    ):
        stub_recipe("teacher=null", "trainer.num_generations=4", "trainer.teacher_model_revision=main")


def _teacher_like(tiny_model, dest, change):
    """A copy of the tiny model with its tokenizer or config changed by `change(tokenizer, config)`."""
    from transformers import AutoConfig, AutoTokenizer

    tokenizer, config = AutoTokenizer.from_pretrained(tiny_model), AutoConfig.from_pretrained(tiny_model)
    change(tokenizer, config)
    tokenizer.save_pretrained(dest)
    config.save_pretrained(dest)  # no weights: the check must not need them
    return dest


def test_check_refuses_a_teacher_with_another_vocabulary_before_any_model_loads(tiny_model, tmp_path):
    out = tmp_path / "o"
    same = _teacher_like(tiny_model, tmp_path / "same", lambda t, c: None)
    lines = []
    check(
        load_recipe(write_recipe(tmp_path / "ok.yaml", distill_recipe(tiny_model, same, out))),
        log=lines.append,
    )
    assert any(line.startswith(f"teacher {same}: the student's vocabulary (") for line in lines), lines
    assert any("judge and log the samples; the teacher trains" in line for line in lines)

    more = _teacher_like(tiny_model, tmp_path / "more", lambda t, c: t.add_tokens(["<extra_token>"]))
    recipe = load_recipe(write_recipe(tmp_path / "more.yaml", distill_recipe(tiny_model, more, out)))
    with pytest.raises(
        RecipeError, match=r"teacher\.name_or_path: the teacher's tokenizer differs .*'<extra_token>'"
    ):
        check(recipe, log=lambda *_: None)

    smaller = _teacher_like(
        tiny_model, tmp_path / "smaller", lambda t, c: setattr(c, "vocab_size", c.vocab_size - 1)
    )
    recipe = load_recipe(write_recipe(tmp_path / "smaller.yaml", distill_recipe(tiny_model, smaller, out)))
    with pytest.raises(
        RecipeError, match=r"teacher\.name_or_path: the teacher's output layer has \d+ rows, fewer"
    ):
        check(recipe, log=lambda *_: None)


def _mean_reverse_kl(student_path, teacher_path, texts) -> float:
    """KL(student || teacher) of the next-token distributions, averaged over every position of `texts`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(teacher_path)
    student = AutoModelForCausalLM.from_pretrained(student_path)
    teacher = AutoModelForCausalLM.from_pretrained(teacher_path)
    total, count = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            s = torch.log_softmax(student(ids).logits[0], -1)
            t = torch.log_softmax(teacher(ids).logits[0, :, : s.shape[-1]], -1)  # without padding rows
            total += (s.exp() * (s - t)).sum(-1).sum().item()
            count += ids.shape[1]
    return total / count


@pytest.mark.long  # about a minute; the smoke tier distils under two processes too
def test_a_tiny_student_distilled_from_a_tiny_teacher_end_to_end(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    from grpo_recipes.local_model import make_tiny_model, smollm2_gguf_path

    # Other weights, the same tokenizer; and padding rows in its output layer, as Qwen2.5-7B has beyond 1.5B's
    # (TRL refuses such a pair as it is).
    teacher = make_tiny_model(tmp_path / "teacher", smollm2_gguf_path(), seed=1)
    padded = AutoModelForCausalLM.from_pretrained(teacher)
    padded.resize_token_embeddings(padded.config.vocab_size + 64)
    padded.save_pretrained(teacher)
    out = tmp_path / "run"
    data = distill_recipe(tiny_model, teacher, out, max_steps=6, learning_rate=1.0e-3, save_steps=6)
    recipe = write_recipe(tmp_path / "distill.yaml", data)
    result = run_script("train.py", "--config", str(recipe))
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert "4 prompts per optimizer step, one sample each" in log
    teacher_lines = [line for line in log.splitlines() if line.startswith("teacher ")]
    assert teacher_lines == [
        f"teacher {teacher}: the student's vocabulary (49152 tokens); its output layer's 64 padding rows beyond "
        "the student's 49152 are dropped (no token id reaches them)"
    ]

    history = json.loads((out / "log_history.json").read_text())
    steps = [h for h in history if "divergence" in h]
    assert [h["step"] for h in steps] == list(range(1, 7))
    for h in steps:  # the loss is the divergence; the recipe's reward and the lengths are measured beside it
        assert (
            h["divergence"] == h["loss"] > 0
            and 0 <= h["reward"] <= 1
            and 0 < h["completions/mean_length"] <= 8
        )
        assert f"step {h['step']}/6  reward {h['reward']:.3f}  divergence {h['divergence']:.3f}" in log

    # The student, the teacher and the trained student on the same held-out problems.
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trainer"] == "distillation" and summary["global_step"] == 6
    teacher_eval = json.loads((out / "eval_teacher.json").read_text())
    samples = [json.loads(line) for line in (out / "eval_teacher_samples.jsonl").read_text().splitlines()]
    assert teacher_eval["total"] == 8 and sum(s["correct"] for s in samples) == teacher_eval["correct"]
    assert summary["teacher"] == teacher_eval and summary["teacher_comparison"] is not None
    assert "teacher_gain_recovered" in summary
    tail = result.stdout.strip().splitlines()[-7:]
    assert tail[0] == "held-out greedy accuracy on 8 problems (95 % interval)", tail
    assert [line.split(":")[0].strip() for line in tail[1:4]] == [
        "base model",
        "after distillation",
        "teacher",
    ]
    assert tail[4] == "changes on the same problems"
    assert tail[5].startswith("  distillation:") and tail[6].startswith("  student against the teacher:")
    assert "zero gradient" not in result.stdout  # every sampled token has a gradient

    # What it learnt: the student's next-token distributions moved towards the teacher's, on text it never saw.
    texts = ["Calculate 3 + 4. End with 'Answer: <number>'.", "The quick brown fox jumps over the lazy dog."]
    before, after = _mean_reverse_kl(tiny_model, teacher, texts), _mean_reverse_kl(out, teacher, texts)
    assert math.isfinite(after) and after < 0.9 * before, (before, after)
    report = (out / "report.md").read_text()
    assert "after distillation" in report and "| teacher |" in report, report


def test_distill_cpu_without_its_teacher_stops_in_one_line_naming_the_command_that_builds_it(tmp_path):
    missing = tmp_path / "outputs" / "code-cpu"  # where a fresh clone has no teacher yet
    result = run_script("train.py", "--config", "recipes/distill-cpu.yaml", f"teacher.name_or_path={missing}")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert (
        line.startswith("error: recipes/distill-cpu.yaml") and "teacher.name_or_path: no model folder" in line
    )
    assert line.endswith(
        "(build it first: make train RECIPE=code-cpu); give an existing folder or a Hub id such "
        "as 'Qwen/Qwen2.5-0.5B'."
    ), line


@pytest.fixture
def tiny_pair(tiny_model, tmp_path):
    """A DistillationTrainer of this repository on the tiny student and a tiny teacher (other weights, the same
    tokenizer), built as train() builds it; `make(**teacher_keys)`."""
    from grpo_recipes.data import load_splits
    from grpo_recipes.local_model import make_tiny_model, smollm2_gguf_path
    from grpo_recipes.models import load_model, load_tokenizer
    from grpo_recipes.training.distillation import RecipeDistillationTrainer, load_teacher

    teacher = make_tiny_model(tmp_path / "teacher", smollm2_gguf_path(), seed=1)

    def make(**keys):
        data = distill_recipe(tiny_model, teacher, tmp_path / "run", max_steps=1, temperature=1.0)
        data["teacher"].update(keys)
        recipe = load_recipe(write_recipe(tmp_path / "distill.yaml", data))
        model = load_model(recipe.model)
        return RecipeDistillationTrainer(
            model=model,
            args=trainer_config(recipe),
            train_dataset=load_splits(recipe).train,
            processing_class=load_tokenizer(recipe.model),
            teacher_model=load_teacher(recipe, model.config.vocab_size),
            samples=recipe.teacher.samples,
            estimator=recipe.teacher.estimator,
        )

    return make


def _greedy(model, prompt_ids, tokens):
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor(prompt_ids), do_sample=False, max_new_tokens=tokens)
    return out[:, len(prompt_ids[0]) :].tolist()


def test_off_policy_samples_are_the_teachers(tiny_pair):
    """`teacher.samples: teacher`: TRL's generation runs on the teacher's model (greedy here, so comparable)."""
    trainer = tiny_pair(samples="teacher")
    trainer.generation_config.do_sample = False
    trainer.generation_config.min_new_tokens = trainer.generation_config.max_new_tokens = 6
    prompt = [trainer.processing_class("Calculate 3 + 4.")["input_ids"]]
    sampled = trainer._generate_single_turn(prompt, None, {})
    assert sampled == _greedy(trainer.teacher_model, prompt, 6)
    assert sampled != _greedy(trainer.model, prompt, 6)  # two random models: different greedy text
    assert trainer.model_wrapped is trainer.model  # the student is back in place


def _two_samples(tokenizer) -> dict:
    """A batch as TRL's loss receives it: one prompt twice, two completions, the second ended early."""
    import torch

    prompt = torch.tensor([tokenizer("Calculate 3 + 4.")["input_ids"]] * 2)
    completion = torch.tensor(
        [tokenizer(" 7. Answer: 7")["input_ids"], tokenizer(" 12 and 9 more")["input_ids"]]
    )
    mask = torch.ones_like(completion)
    mask[1, -2:] = 0  # the second sample ended early
    return {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones_like(prompt),
        "completion_ids": completion,
        "completion_mask": mask,
    }


def test_the_sampled_token_loss_reads_the_drawn_tokens_log_ratio(tiny_pair):
    """The loss and the logged reverse-KL estimate, against log-probabilities computed from each model's own
    forward pass: the token at each completion position, log teacher - log student as the advantage."""
    import torch

    trainer = tiny_pair(estimator="sampled_token")
    trainer.model.train()  # as in a training step (the metric goes to the training log)
    inputs = _two_samples(trainer.processing_class)
    prompt, completion, mask = inputs["prompt_ids"], inputs["completion_ids"], inputs["completion_mask"]
    loss, entropy_sum, valid = trainer._sampled_token_loss(trainer.model, inputs, None)

    ids = torch.cat([prompt, completion], dim=1)
    with torch.no_grad():
        start = prompt.shape[1] - 1  # the logits at position i predict token i + 1
        student = torch.log_softmax(trainer.model(ids).logits[:, start:-1].float(), -1)
        teacher = torch.log_softmax(trainer.teacher_model(ids).logits[:, start:-1].float(), -1)
    s = student.gather(-1, completion.unsqueeze(-1)).squeeze(-1)
    t = teacher.gather(-1, completion.unsqueeze(-1)).squeeze(-1)
    m = mask.float()
    assert valid.item() == m.sum().item()
    assert loss.item() == pytest.approx((-((t - s) * s * m).sum() / m.sum()).item(), rel=1e-4)
    logged = trainer._metrics["train"]["sampled_reverse_kl"][-1]
    assert logged == pytest.approx((((s - t) * m).sum() / m.sum()).item(), rel=1e-4)
    assert entropy_sum.item() == pytest.approx(
        (-(student.exp() * student).sum(-1) * m).sum().item(), rel=1e-4
    )
    # Its gradient flows into the student only, through the drawn tokens' log-probabilities.
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in trainer.model.parameters())
    assert all(p.grad is None for p in trainer.teacher_model.parameters())


def test_the_one_hot_loss_is_the_cross_entropy_of_the_teachers_tokens(tiny_pair):
    """Supervised fine-tuning on the teacher's text: the loss is the student's cross-entropy of the drawn
    tokens at temperature 1, and the logged divergence estimates the forward KL along the teacher's samples."""
    import torch

    trainer = tiny_pair(samples="teacher", estimator="one_hot")
    trainer.temperature = 0.5  # the loss stays at 1; the logged estimate softens both models' distributions
    trainer.model.train()
    inputs = _two_samples(trainer.processing_class)
    prompt, completion, mask = inputs["prompt_ids"], inputs["completion_ids"], inputs["completion_mask"]
    loss, _, valid = trainer._compute_loss(trainer.model, inputs, None)

    ids = torch.cat([prompt, completion], dim=1)
    start = prompt.shape[1] - 1
    with torch.no_grad():
        student_logits = trainer.model(ids).logits[:, start:-1].float()
        teacher_logits = trainer.teacher_model(ids).logits[:, start:-1].float()

    def drawn(logits, temperature):
        return torch.log_softmax(logits / temperature, -1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)

    m = mask.float()
    assert valid.item() == m.sum().item()
    assert loss.item() == pytest.approx((-(drawn(student_logits, 1.0) * m).sum() / m.sum()).item(), rel=1e-4)
    logged = trainer._metrics["train"]["sampled_forward_kl"][-1]
    forward = ((drawn(teacher_logits, 0.5) - drawn(student_logits, 0.5)) * m).sum() / m.sum()
    assert logged == pytest.approx(forward.item(), rel=1e-4)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in trainer.model.parameters())
    assert all(p.grad is None for p in trainer.teacher_model.parameters())


@pytest.mark.long  # two trainers built and stepped; the loss and the sampling have their own tests above
@pytest.mark.parametrize(
    "keys",
    [{"samples": "teacher"}, {"estimator": "sampled_token"}, {"samples": "teacher", "estimator": "one_hot"}],
)
def test_each_variant_trains_a_step(tiny_pair, keys):
    trainer = tiny_pair(**keys)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    logged = [h for h in trainer.state.log_history if "divergence" in h]
    assert len(logged) == 1 and math.isfinite(logged[0]["divergence"])
    if "estimator" in keys:  # a surrogate loss or a cross-entropy: its KL estimate is logged instead
        assert logged[0]["divergence"] != logged[0]["loss"]
    assert any(not (a == b).all() for a, b in zip(before, trainer.model.parameters(), strict=True))
