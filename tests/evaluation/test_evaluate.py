"""Evaluation: scoring, summaries recomputed by brute force, and scripts/evaluate.py on real tiny models.

Every metric in metrics.json is recomputed here from samples.jsonl by brute force (all k-subsets for pass@k,
the votes of each block for maj@k), independently of grpo_recipes.evaluation.metrics.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections import Counter
from pathlib import Path

import pytest
from support import (
    MINIMAL,
    SHARED_DATA,
    run_script,
    run_script_in_process,
    tiny_recipe,
    two_process_launcher,
    write_recipe,
)

from grpo_recipes.evaluation.evaluate import Launch, _engine_gpu, greedy_accuracy
from grpo_recipes.evaluation.metrics import compare, k_values, per_problem, summarize
from grpo_recipes.recipe import parse_recipe

GSM8K_TEST = SHARED_DATA / "gsm8k" / "test.jsonl"


# --------------------------------------------------------------------------------------------------------
# Recomputing metrics.json from samples.jsonl, by brute force.
# --------------------------------------------------------------------------------------------------------


def recompute(samples: list[dict]) -> dict[str, float]:
    problems: dict[int, list[dict]] = {}
    for record in samples:
        problems.setdefault(record["problem"], []).append(record)
    groups = [sorted(g, key=lambda r: r["sample"]) for _, g in sorted(problems.items())]
    n = len(groups[0])
    figures: dict[str, float] = {}
    for k in k_values(n):
        per = []
        for group in groups:
            subsets = list(itertools.combinations([r["correct"] for r in group], k))
            per.append(sum(any(s) for s in subsets) / len(subsets))
        figures[f"pass@{k}"] = sum(per) / len(per)
        per = []
        for group in groups:
            blocks = [group[i : i + k] for i in range(0, n - k + 1, k)]
            scores = []
            for block in blocks:
                counts = Counter(r["vote"] for r in block if r["vote"] is not None)
                if not counts:
                    scores.append(0.0)
                    continue
                top = max(counts.values())
                leaders = {v for v, c in counts.items() if c == top}
                right = {r["vote"] for r in block if r["vote"] in leaders and r["correct"]}
                scores.append(len(right) / len(leaders))
            per.append(sum(scores) / len(scores))
        figures[f"maj@{k}"] = sum(per) / len(per)
    figures["mean_completion_tokens"] = sum(r["tokens"] for r in samples) / len(samples)
    figures["truncated"] = sum(r["truncated"] for r in samples) / len(samples)
    figures["well_formed"] = sum(r["answer"] is not None for r in samples) / len(samples)
    return figures


def check_folder(out: Path, problems: int, samples_per_problem: int) -> tuple[dict, list[dict]]:
    """The three files exist and agree: metrics.json is what samples.jsonl recomputes to."""
    assert {p.name for p in out.iterdir()} >= {"samples.jsonl", "metrics.json", "report.md"}
    metrics = json.loads((out / "metrics.json").read_text())
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert metrics["problems"] == problems and metrics["samples_per_problem"] == samples_per_problem
    assert len(samples) == problems * samples_per_problem
    assert sorted((r["problem"], r["sample"]) for r in samples) == [
        (p, s) for p in range(problems) for s in range(samples_per_problem)
    ]
    for record in samples:
        assert {"problem", "sample", "prompt", "completion", "answer", "gold", "correct", "rewards"} <= set(
            record
        )
        assert record["correct"] in (0, 1)
        # The verdict is the evaluation reward's full marks; the vote is None exactly when there is no answer.
        assert record["correct"] == int(record["rewards"][metrics["reward"]] == 1.0)
        assert (record["vote"] is None) == (record["answer"] is None)
    for key, value in recompute(samples).items():
        assert metrics[key] == pytest.approx(value), key
        if "@" in key:
            assert 0.0 <= metrics[key] <= 1.0
    assert f"pass@{samples_per_problem}" in metrics and f"maj@{samples_per_problem}" in metrics
    report = (out / "report.md").read_text()
    assert f"| pass@{samples_per_problem} |" in report and "samples.jsonl" in report
    return metrics, samples


def test_summarize_agrees_with_the_brute_force_recomputation():
    import random

    rng = random.Random(0)
    samples = []
    for problem in range(30):
        for sample in range(8):
            answer = rng.choice(["1", "2", "3", None])
            samples.append(
                {
                    "problem": problem,
                    "sample": sample,
                    "answer": answer,
                    "vote": answer,
                    "correct": int(answer == "1"),
                    "tokens": rng.randint(1, 9),
                    "truncated": rng.random() < 0.2,
                }
            )
    metrics = summarize(samples)
    for key, value in recompute(samples).items():
        assert metrics[key] == pytest.approx(value), key
    assert set(per_problem(samples)) == {f"{m}@{k}" for m in ("pass", "maj") for k in (1, 2, 4, 8)}


def test_votes_use_the_reward_equivalence(tiny_model):
    """math_accuracy counts 1/2 and 0.5 as one answer: they vote together and outvote a 2-1 split."""
    from grpo_recipes.evaluation.evaluate import score_samples
    from grpo_recipes.evaluation.generate import Generation
    from grpo_recipes.recipe import parse_recipe

    recipe = parse_recipe(
        {
            "model": {"name_or_path": str(tiny_model)},
            "dataset": {"generator": {"name": "arithmetic"}},
            "prompt": {"user": "{question}", "solution_column": "answer"},
            "rewards": [{"name": "math_accuracy"}],
        },
        "x",
        check_trainer=False,
    )
    texts = [
        r"\boxed{\frac{1}{2}}",
        r"\boxed{0.5}",
        r"\boxed{3}",
        r"\boxed{3}",
        r"\boxed{\dfrac12}",
        "no answer",
    ]
    rows = [{"prompt": "p", "solution": "0.5", "question": "p", "answer": "0.5"}]
    samples = score_samples(recipe, rows, [[Generation(t, 3, False) for t in texts]], [0])
    assert [r["vote"] for r in samples] == [r"\frac{1}{2}"] * 2 + ["3", "3", r"\frac{1}{2}", None]
    assert [r["correct"] for r in samples] == [1, 1, 0, 0, 1, 0]
    assert summarize(samples)["maj@6"] == 1.0


# --------------------------------------------------------------------------------------------------------
# scripts/evaluate.py end to end.
# --------------------------------------------------------------------------------------------------------


def _recipe(tmp_path: Path, tiny_model: Path, **changes) -> Path:
    data = tiny_recipe(tiny_model, tmp_path / "run")
    data["evaluation"] = {"max_samples": 8, "max_new_tokens": 6, "batch_size": 8}
    data.update(changes)
    return write_recipe(tmp_path / "recipe.yaml", data)


def test_evaluate_generated_arithmetic_greedy(tmp_path, tiny_model):
    recipe = _recipe(tmp_path, tiny_model)
    out = tmp_path / "eval"
    result = run_script(
        "evaluate.py", "--config", str(recipe), "--backend", "transformers", "--output-dir", str(out)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics, _ = check_folder(out, problems=8, samples_per_problem=1)
    assert metrics["sampling"] == "greedy" and metrics["backend"] == "transformers"
    assert "pass@1" in result.stdout and str(out) in result.stdout


@pytest.mark.skipif(not GSM8K_TEST.is_file(), reason="needs ../shared/data/gsm8k")
def test_evaluate_gsm8k_rows_with_samples(tmp_path, tiny_model):
    gsm8k = write_recipe(
        tmp_path / "gsm8k.yaml",
        {
            "model": {"name_or_path": str(tiny_model), "dtype": "float32"},
            "dataset": {"path": str(GSM8K_TEST)},
            "prompt": {"user": "{question}", "solution_column": "answer"},
            "rewards": [{"name": "gsm8k_accuracy", "params": {"last_number_fallback": True}}],
            "evaluation": {"max_new_tokens": 8, "batch_size": 20},
        },
    )
    out = tmp_path / "eval"
    result = run_script(
        "evaluate.py", "--config", str(gsm8k), "--data", str(GSM8K_TEST), "--limit", "20", "--samples", "4",
        "--temperature", "1.0", "--backend", "transformers", "--output-dir", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    metrics, samples = check_folder(out, problems=20, samples_per_problem=4)
    assert metrics["data"] == str(GSM8K_TEST)
    assert {r["gold"] for r in samples} <= {json.loads(line)["answer"] for line in GSM8K_TEST.open()}
    # Random weights at temperature 1: the 4 samples of a problem differ.
    assert any(len({r["completion"] for r in samples if r["problem"] == p}) > 1 for p in range(20))


def test_evaluate_refuses_greedy_samples_and_bad_data(tmp_path, tiny_model):
    # The first in a real process; the others in this one, since each refusal comes before a model loads.
    recipe = _recipe(tmp_path, tiny_model)
    result = run_script("evaluate.py", "--config", str(recipe), "--samples", "4", "--temperature", "0")
    assert result.returncode == 2 and "--temperature > 0" in result.stderr
    result = run_script_in_process(
        "evaluate.py", "--config", str(recipe), "--data", str(tmp_path / "missing.jsonl")
    )
    assert result.returncode == 2 and "missing.jsonl: no such data file" in result.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"q": "1 + 1", "a": "2"}) + "\n")
    result = run_script_in_process("evaluate.py", "--config", str(recipe), "--data", str(bad))
    assert result.returncode == 2 and "question" in result.stderr, result.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "1 + 1", "answer": \n')
    result = run_script_in_process("evaluate.py", "--config", str(recipe), "--data", str(broken))
    # The file, the line and why, once (not wrapped in a second "cannot be read").
    assert result.returncode == 2 and "broken.jsonl:1: not a JSON object: " in result.stderr, result.stderr
    assert "cannot be read" not in result.stderr
    result = run_script_in_process("evaluate.py", "--config", str(recipe), "--top-p", "0")
    assert result.returncode == 2 and "--top-p: expected a number in (0, 1], got 0" in result.stderr
    # A mistyped model folder is found out before the other model is evaluated, not as a Hub error after it.
    typo = str(tmp_path / "outputs" / "defualt")
    result = run_script_in_process(
        "evaluate.py", "--config", str(recipe), "--base", str(tiny_model), "--model", typo
    )
    assert result.returncode == 2 and f"--model: no model folder at {typo}" in result.stderr, result.stderr
    assert "accuracy" not in result.stdout and "pass@1" not in result.stdout
    result = run_script_in_process("evaluate.py", "--config", str(recipe), "--base", typo)
    assert result.returncode == 2 and f"--base: no model folder at {typo}" in result.stderr, result.stderr


def _adapter(tiny_model: Path, folder: Path) -> Path:
    """A LoRA adapter on the tiny model whose weights are not zero (so merging changes the model)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model),
        LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False),
    )
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(folder)
    return folder


def test_compare_a_lora_adapter_with_its_base(tmp_path, tiny_model):
    recipe = _recipe(tmp_path, tiny_model)
    adapter = _adapter(tiny_model, tmp_path / "adapter")
    out = tmp_path / "compare"
    result = run_script(
        "evaluate.py", "--config", str(recipe), "--model", str(adapter), "--base", str(tiny_model),
        "--samples", "2", "--temperature", "1.0", "--backend", "transformers", "--output-dir", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    _, base = check_folder(out / "base", 8, 2)
    _, model = check_folder(out / "model", 8, 2)
    assert [r["completion"] for r in base] != [r["completion"] for r in model]  # the adapter was applied
    comparison = json.loads((out / "model" / "comparison.json").read_text())
    expected = compare(base, model)
    assert comparison["metrics"] == expected["metrics"]
    assert "difference (paired 95 % interval)" in result.stdout and "by base only" in result.stdout


@pytest.mark.smoke
def test_compare_with_vllm_matches_the_file_contract(tmp_path, tiny_model):
    """vLLM's CPU build, an adapter to merge, and two engines one after the other (make compare)."""
    pytest.importorskip("vllm")
    recipe = _recipe(tmp_path, tiny_model)
    adapter = _adapter(tiny_model, tmp_path / "adapter")
    out, scratch = tmp_path / "eval", tmp_path / "tmp"
    scratch.mkdir()
    result = run_script(
        "evaluate.py", "--config", str(recipe), "--model", str(adapter), "--base", str(tiny_model),
        "--samples", "4", "--temperature", "1.0", "--output-dir", str(out), extra_env={"TMPDIR": str(scratch)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for role in ("base", "model"):
        metrics, samples = check_folder(out / role, problems=8, samples_per_problem=4)
        assert metrics["backend"] == "vllm"
        assert all(0 < r["tokens"] <= 6 for r in samples if r["completion"])
    assert (out / "model" / "comparison.json").is_file()
    assert not list(scratch.glob("grpo-eval-*")), "the merged adapter or the engine's files are left behind"


@pytest.mark.smoke
def test_evaluate_split_across_two_processes_gives_the_single_process_result(tmp_path, tiny_model):
    recipe = _recipe(tmp_path, tiny_model)
    single, double = tmp_path / "one", tmp_path / "two"
    result = run_script(
        "evaluate.py", "--config", str(recipe), "--backend", "transformers", "--output-dir", str(single)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    launcher = two_process_launcher()
    result = run_script(
        "evaluate.py", "--config", str(recipe), "--backend", "transformers", "--output-dir", str(double),
        launcher=launcher, extra_env={"CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "process 1 of 2" in result.stdout + result.stderr
    one = [json.loads(line) for line in (single / "samples.jsonl").read_text().splitlines()]
    two = [json.loads(line) for line in (double / "samples.jsonl").read_text().splitlines()]
    assert one == two  # greedy: the same completions, gathered in problem order
    assert not (double / ".shards").exists() or not any((double / ".shards").iterdir())


@pytest.mark.parametrize(
    ("visible", "local_rank", "world", "expected"),
    [
        (None, 0, 1, None),  # not launched: the engine sees what the process sees
        (None, 3, 8, "3"),
        ("", 1, 2, "1"),
        ("4,5,6,7", 2, 4, "6"),  # a launch restricted to some GPUs: the local rank's entry, not GPU 2
        ("GPU-a,GPU-b", 1, 2, "GPU-b"),
    ],
)
def test_each_launched_process_gives_its_engine_its_own_gpu(
    monkeypatch, visible, local_rank, world, expected
):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert _engine_gpu(Launch(rank=local_rank, world=world, local_rank=local_rank)) == expected


@pytest.mark.smoke
def test_two_processes_each_run_their_own_vllm_engine(tmp_path, tiny_model):
    """`accelerate launch` with vLLM: each process starts an engine on its share; the gathered greedy result
    is the one-process result."""
    pytest.importorskip("vllm")
    recipe = _recipe(tmp_path, tiny_model)
    single, double = tmp_path / "one", tmp_path / "two"
    args = ["evaluate.py", "--config", str(recipe), "--backend", "vllm", "--limit", "6"]
    result = run_script(*args, "--output-dir", str(single))
    assert result.returncode == 0, result.stderr[-3000:]
    result = run_script(
        *args,
        "--output-dir",
        str(double),
        launcher=two_process_launcher(),
        extra_env={"CUDA_VISIBLE_DEVICES": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert "3 of 6 problems" in log and "process 1 of 2" in log and "vllm" in log
    one = [json.loads(line) for line in (single / "samples.jsonl").read_text().splitlines()]
    two = [json.loads(line) for line in (double / "samples.jsonl").read_text().splitlines()]
    assert one == two
    assert json.loads((double / "metrics.json").read_text())["processes"] == 2


def test_greedy_accuracy_scores_generations_with_the_recipe_reward(tiny_model):
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = copy.deepcopy(MINIMAL)
    data["model"]["name_or_path"] = str(tiny_model)
    data["evaluation"] = {"max_new_tokens": 4, "batch_size": 3}
    recipe = parse_recipe(data, "x", check_trainer=False)
    model, tokenizer = (
        AutoModelForCausalLM.from_pretrained(tiny_model),
        AutoTokenizer.from_pretrained(tiny_model),
    )
    rows = [{"prompt": [{"role": "user", "content": f"{i} + 0"}], "solution": str(i)} for i in range(5)]
    side_before = tokenizer.padding_side
    lines = []
    result = greedy_accuracy(model, tokenizer, datasets.Dataset.from_list(rows), recipe, log=lines.append)
    assert result.total == 5 and 0 <= result.correct <= 5
    assert lines == [f"  evaluated 5 problems (5 on this process): {result.correct} correct"]
    assert len(result.examples) == 5 and all(isinstance(e["completion"], str) for e in result.examples)
    assert [
        e["correct"] for e in result.examples
    ] == result.correct_by_problem  # one verdict per problem, in order
    assert sum(result.correct_by_problem) == result.correct
    assert tokenizer.padding_side == side_before  # restored after left-padded generation
