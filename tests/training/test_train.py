"""scripts/train.py run as a user runs it: a real (tiny) model, a real GRPOTrainer, real files out."""

from __future__ import annotations

import json

import pytest
import yaml
from support import (
    model_stub,
    run_script,
    run_script_in_process,
    tiny_recipe,
    two_process_launcher,
    write_recipe,
)

from grpo_recipes.recipe import load_recipe

pytestmark = pytest.mark.slow


def test_two_steps_write_a_complete_output_directory(tiny_run):
    recipe, out, result = tiny_run
    log = result.stdout + result.stderr
    assert "step 1/2  reward" in log and "step 2/2  reward" in log
    assert "held-out greedy accuracy" in log

    # The resolved recipe carries the override and the versions, and is itself a valid recipe.
    resolved = (out / "resolved_recipe.yaml").read_text()
    assert "# trl: " in resolved and "# torch: " in resolved
    assert yaml.safe_load(resolved)["trainer"]["learning_rate"] == pytest.approx(5e-5)
    assert load_recipe(out / "resolved_recipe.yaml").trainer["max_steps"] == 2
    info = json.loads((out / "run_info.json").read_text())
    assert info["world_size"] == 1 and info["versions"]["trl"]

    history = json.loads((out / "log_history.json").read_text())
    steps = [h for h in history if "reward" in h]
    assert [h["step"] for h in steps] == [1, 2]
    assert all("zero_variance_groups" in h for h in steps)
    # Generation's share of each step is logged (it is part of the step, not all of it).
    assert all(0 < h["time/generation_seconds"] < h["step_time"] for h in steps), steps
    assert (out / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("eval_before.json", "eval_after.json"):
        result_json = json.loads((out / name).read_text())
        assert (
            result_json["total"] == 8
            and 0 <= result_json["ci_low"] <= result_json["accuracy"] <= result_json["ci_high"]
        )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["global_step"] == 2
    # Before/after go through make eval's scoring: samples files, and make compare's paired comparison.
    verdicts = {}
    for when in ("before", "after"):
        samples = [json.loads(line) for line in (out / f"eval_{when}_samples.jsonl").read_text().splitlines()]
        assert [r["problem"] for r in samples] == list(range(8))
        verdicts[when] = [r["correct"] for r in samples]
        assert sum(verdicts[when]) == json.loads((out / f"eval_{when}.json").read_text())["correct"]
    comparison = summary["comparison"]
    assert comparison["difference"] == pytest.approx((sum(verdicts["after"]) - sum(verdicts["before"])) / 8)
    assert comparison["low"] <= comparison["difference"] <= comparison["high"]
    only_after = sum(a and not b for a, b in zip(verdicts["after"], verdicts["before"], strict=True))
    assert comparison["solved_by_model_only"] == only_after
    assert (
        "(paired 95 % interval)" in log and f"scripts/evaluate.py --config {recipe} --model {out}" in log
    ), log[-2500:]
    # The run ends with the held-out accuracy of each stage, GRPO's paired change and its zero-gradient steps.
    before, after = (json.loads((out / f"eval_{when}.json").read_text()) for when in ("before", "after"))
    tail = result.stdout.strip().splitlines()[-6:]
    assert tail[0] == "held-out greedy accuracy on 8 problems (95 % interval)", tail
    assert tail[1].startswith("  base model:") and tail[1].endswith(f"({before['correct']}/8)")
    assert tail[2].startswith("  after GRPO:") and tail[2].endswith(f"({after['correct']}/8)")
    assert tail[3] == "changes on the same problems"
    assert tail[4].startswith("  GRPO:") and "(paired 95 % interval)" in tail[4]
    zero = summary["sampling"]["zero_gradient_steps"]
    assert tail[5].startswith(f"GRPO steps with zero gradient: {zero} of 2 (")
    assert summary["base"] is None and summary["warmup_comparison"] is None  # no warm-up: GRPO from the base

    # The saved model reloads and generates.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    ids = tokenizer("Calculate 1 + 1.", return_tensors="pt")
    generated = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] == ids["input_ids"].shape[1] + 4


def test_a_warm_up_trains_the_lora_adapter_that_grpo_goes_on_with(tiny_model, tmp_path):
    out = tmp_path / "run"
    data = tiny_recipe(tiny_model, out, save_steps=1)
    data["model"]["lora"] = {"r": 4, "alpha": 8, "target_modules": "all-linear"}
    data["dataset"]["generator"]["warmup_size"] = 4  # demonstrations apart from GRPO's rows
    data["warmup"] = {
        "answer": "{question} = {answer}",
        "examples": 4,
        "max_steps": 6,
        "per_device_train_batch_size": 4,
        "learning_rate": 0.01,
    }
    recipe = write_recipe(tmp_path / "warm.yaml", data)
    first = run_script("train.py", "--config", str(recipe))
    assert first.returncode == 0, first.stderr[-3000:]
    log = first.stdout + first.stderr
    assert "first warm-up demonstration" not in log  # that line is --check's
    assert "64 training rows, 8 held-out rows, 4 rows apart for the warm-up's demonstrations" in log
    assert (
        "warm-up: 4 demonstrations, 6 supervised steps (batch 4, learning rate 0.01) on the LoRA adapter"
        in log
    )
    assert log.index("evaluating the base model on 8 held-out prompts") < log.index(
        "evaluating the warmed-up model on 8 held-out prompts"
    )
    run_info = json.loads((out / "run_info.json").read_text())
    info = run_info["warmup"]
    assert info["steps"] == 6 and info["last_loss"] < info["first_loss"]  # the same 4 examples, learnt
    assert info["device"] == run_info["device"]  # the warm-up ran where the trainer trains
    summary = json.loads((out / "summary.json").read_text())
    assert summary["warmup_seconds"] == info["seconds"] > 0

    # Three evaluations on the same problems, the paired change of each stage, all in the last lines.
    results = {
        when: json.loads((out / f"eval_{when}.json").read_text()) for when in ("base", "before", "after")
    }
    assert all(summary[when] == results[when] for when in results)
    tail = first.stdout.strip().splitlines()[-9:]
    assert tail[0] == "held-out greedy accuracy on 8 problems (95 % interval)", tail
    for line, (name, when) in zip(
        tail[1:4],
        [("base model", "base"), ("after the warm-up", "before"), ("after GRPO", "after")],
        strict=True,
    ):
        assert line.startswith(f"  {name}:") and line.endswith(f"({results[when]['correct']}/8)"), line
    assert tail[4] == "changes on the same problems"
    for line, name, key in zip(
        tail[5:8],
        ("warm-up", "GRPO", "in all"),
        ("warmup_comparison", "comparison", "overall_comparison"),
        strict=True,
    ):
        assert line.startswith(f"  {name}:") and summary[key] is not None, line
        assert f"{100 * summary[key]['difference']:+.1f} points" in line
    assert tail[8].startswith("GRPO steps with zero gradient: ")
    # The warm-up changed the adapter's greedy answers: the base and the warmed-up model differ on a problem.
    base_samples, warm_samples = (
        [
            json.loads(line)["completion"]
            for line in (out / f"eval_{when}_samples.jsonl").read_text().splitlines()
        ]
        for when in ("base", "before")
    )
    assert base_samples != warm_samples
    report = (out / "report.md").read_text()
    assert "| base model | " in report and "| after the warm-up | " in report and "| after GRPO | " in report
    assert "| warm-up | " in report and "| in all | " in report

    # The base evaluation is the base model's own: make eval of the tiny model gives the same completions.
    evaluated = run_script(
        "evaluate.py",
        "--config",
        str(recipe),
        "--model",
        str(tiny_model),
        "--output-dir",
        str(tmp_path / "base-eval"),
        "--backend",
        "transformers",
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    samples = (tmp_path / "base-eval" / "samples.jsonl").read_text().splitlines()
    assert [json.loads(line)["completion"] for line in samples] == base_samples

    # One adapter, saved as the run's model: a fresh adapter's B matrices are zero, and the tiny model's
    # all-wrong groups give GRPO no gradient, so a non-zero B is the warm-up's, carried through the trainer.
    from safetensors.torch import load_file

    weights = load_file(out / "adapter_model.safetensors")
    b = [w for name, w in weights.items() if "lora_B" in name]
    assert b and all(".ref." not in name for name in weights)
    assert any(float(w.abs().max()) > 0 for w in b)
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4

    # Resumed from its checkpoint, the run skips the warm-up: the checkpoint's adapter holds it.
    second = run_script("train.py", "--config", str(recipe), "trainer.max_steps=3")
    assert second.returncode == 0, second.stderr[-3000:]
    assert (
        f"Resuming from {out / 'checkpoint-2'}" in second.stdout
        and "warm-up: 4 demonstrations" not in second.stdout
    )
    # Its evaluations before GRPO are the first run's, read back: the base model's among them.
    assert "held-out accuracy of the base model (from the earlier run)" in second.stdout
    assert json.loads((out / "summary.json").read_text())["global_step"] == 3


def test_a_rerun_resumes_and_held_out_accuracy_every_n_steps_draws_against_minutes(tiny_model, tmp_path):
    """evaluation.every_steps: the policy evaluated during training; summary.json's held_out_curve runs from the
    starting point at 0 minutes to the trained model, the minutes count training only, and report.md has the
    table. A rerun resumes from the last checkpoint, keeps the earlier points and goes on counting from its
    checkpoint's minutes; --no-resume starts over."""
    out = tmp_path / "run"
    data = tiny_recipe(tiny_model, out, max_steps=3, save_steps=3)
    data["evaluation"]["every_steps"] = 1
    recipe = write_recipe(tmp_path / "tiny.yaml", data)
    first = run_script("train.py", "--config", str(recipe))
    assert first.returncode == 0, first.stderr[-3000:]
    for step in (1, 2):
        assert f"held-out accuracy after step {step} (" in first.stdout
    assert "held-out accuracy after step 3 (" not in first.stdout  # the after-evaluation is that point
    summary = json.loads((out / "summary.json").read_text())
    curve = summary["held_out_curve"]
    before, after = (json.loads((out / f"eval_{when}.json").read_text()) for when in ("before", "after"))
    assert [p["step"] for p in curve] == [0, 1, 2, 3]
    assert (curve[0]["minutes"], curve[0]["correct"], curve[-1]["correct"]) == (
        0.0,
        before["correct"],
        after["correct"],
    )
    assert all(p["total"] == 8 and p["accuracy"] == p["correct"] / 8 for p in curve)
    minutes = [p["minutes"] for p in curve]
    assert minutes == sorted(minutes) and minutes[-1] > 0
    # Training alone: the run's wall clock also holds the four evaluations.
    assert minutes[-1] * 60 < summary["train_seconds"]
    saved = json.loads((out / "checkpoint-3" / "training_seconds.json").read_text())["seconds"]
    assert saved / 60 == pytest.approx(minutes[-1], abs=0.02)
    report = (out / "report.md").read_text()
    assert "## Held-out accuracy against minutes of training" in report
    assert f"| 2 | {minutes[2]:.1f} | " in report
    assert (out / "held_out_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "reward_curve.png, held_out_curve.png (again" in first.stdout

    # A rerun resumes from the last checkpoint: it trains steps 4 and 5 only, and the history restored from the
    # checkpoint keeps steps 1-3.
    second = run_script("train.py", "--config", str(recipe), "trainer.max_steps=5", "trainer.save_steps=5")
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"Resuming from {out / 'checkpoint-3'}" in second.stdout
    assert "step 4/5  reward" in second.stdout and "step 5/5  reward" in second.stdout
    assert "step 1/5  reward" not in second.stdout
    history = json.loads((out / "log_history.json").read_text())
    assert [h["step"] for h in history if "reward" in h] == [1, 2, 3, 4, 5]
    state = json.loads((out / "checkpoint-5" / "trainer_state.json").read_text())
    assert state["global_step"] == 5
    resumed = json.loads((out / "summary.json").read_text())["held_out_curve"]
    assert [p["step"] for p in resumed] == [0, 1, 2, 4, 5]
    assert resumed[1:3] == curve[1:3]  # from the checkpoint's log history
    assert resumed[3]["minutes"] > saved / 60  # counted on from the checkpoint's training minutes

    drawn = run_script(
        "report.py",
        *("--curves", str(tmp_path / "curves.png"), "--target", "0", "--label", "first", "--label", "again"),
        *(str(out), str(out)),
    )
    assert drawn.returncode == 0, drawn.stderr
    end = f"| 5 | {100 * resumed[-1]['accuracy']:.1f} % | {resumed[-1]['minutes']:.1f} | 0.0 |"
    assert f"| first {end}" in drawn.stdout and f"| again {end}" in drawn.stdout, drawn.stdout
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # --no-resume starts over; --time-limit 0 ends training after its first step, saved as at max_steps.
    third = run_script(
        "train.py", "--config", str(recipe), "--no-resume", "--time-limit", "0", "trainer.max_steps=3"
    )
    assert third.returncode == 0, third.stderr[-3000:]
    assert "moved the earlier run to" in third.stdout and "Resuming" not in third.stdout
    assert "time limit of 0 min reached after step 1: stopping" in third.stdout
    assert json.loads((out / "summary.json").read_text())["global_step"] == 1
    assert any(p.name.startswith("run.") and (p / "checkpoint-5").is_dir() for p in tmp_path.iterdir())


@pytest.mark.parametrize(
    "override, expected",
    [
        ("trainer.learnin_rate=1e-6", "trainer: unknown key 'learnin_rate'. Did you mean 'learning_rate'?"),
        ("rewards.0.name=numeric", "rewards[0].name: unknown reward 'numeric'"),
        ("prompt.user=Solve {problem}", "prompt.user: placeholder {problem} has no matching dataset column"),
        (
            "prompt.solution_column=solution",
            "prompt.solution_column: column 'solution' is not in the dataset",
        ),
        ("trainer.max_steps=two", "trainer.max_steps: expected an integer, got 'two'"),
        ("model.dtype=fp16", "model.dtype: got 'fp16'; allowed: auto, float32, bfloat16, float16"),
        ("evaluation.every_steps=0", "evaluation.every_steps: must be a whole number of at least 1, got 0."),
    ],
)
def test_bad_recipe_exits_2_with_one_clear_line(tmp_path, override, expected):
    recipe = write_recipe(
        tmp_path / "bad.yaml", tiny_recipe(model_stub(tmp_path / "no-model-needed"), tmp_path / "out")
    )
    # In this process: the refusal comes before anything loads (train.py's exit status 2 from a real process is
    # tested with the agent and distillation recipes).
    result = run_script_in_process("train.py", "--config", str(recipe), override)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0] and str(recipe) in errors[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # nothing started


def test_check_mode_validates_without_loading_a_model(tmp_path):
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_recipe(model_stub(tmp_path / "does-not-exist"), tmp_path / "out")
    )
    result = run_script("train.py", "--config", str(recipe), "--check")
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        "first prompt:" in result.stdout
        and "4 completions per optimizer step = 1 prompt(s) x G=4" in result.stdout
    )


def test_two_process_ddp_on_cpu_really_runs_two_ranks(tiny_model, tmp_path):
    out = tmp_path / "ddp"
    data = tiny_recipe(tiny_model, out, per_device_train_batch_size=2)
    data["evaluation"]["enabled"] = False
    recipe = write_recipe(tmp_path / "ddp.yaml", data)
    launcher = two_process_launcher()
    result = run_script(
        "train.py", "--config", str(recipe), launcher=launcher, extra_env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "[rank 0 of 2] ready on cpu" in result.stdout and "[rank 1 of 2] ready on cpu" in result.stdout
    assert json.loads((out / "run_info.json").read_text())["world_size"] == 2
    assert "2 completions/device x 2 process(es)" in result.stdout
    history = json.loads((out / "log_history.json").read_text())
    assert [h["step"] for h in history if "reward" in h] == [1, 2]
