"""The run report: panels and averages on hand-made logs, then report.md/report.png from a real tiny run."""

from __future__ import annotations

import json
import math
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import run_script

from grpo_recipes.evaluation.report import (
    REPORT_MD,
    REPORT_PNG,
    RunFolderError,
    moving_average,
    plot_reward_curve,
    read_run,
    report_figure_pixels,
    reward_series,
    select_panels,
    smoothing_window,
    stages_table,
    write_report,
)


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's signature and IHDR chunk."""
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def linked_files(markdown: str) -> list[str]:
    """The relative targets of every link and picture in a markdown text."""
    return re.findall(r"\]\(([^)\s]+)\)", markdown)


def history(steps: int = 30, **extra_keys: float) -> list[dict]:
    """A hand-made log_history: reward rising from 0 to 1, a learning rate schedule, a final summary entry."""
    entries = [
        {
            "step": step,
            "reward": step / steps,
            "rewards/numeric_accuracy/mean": step / steps,
            "reward_std": 0.4,
            "zero_variance_groups": 1 - step / steps,
            "completions/mean_length": 20.0,
            "completions/clipped_ratio": 0.0,
            "learning_rate": 1e-5,
            "grad_norm": 0.0 if step == 1 else 0.5,
            **extra_keys,
        }
        for step in range(1, steps + 1)
    ]
    return [*entries, {"step": steps, "train_runtime": 61.0, "train_loss": 0.0}]


def test_moving_average_is_trailing_and_window_grows_with_the_run():
    assert moving_average([1.0, 1.0, 4.0, 4.0], 2) == [1.0, 1.0, 2.5, 4.0]
    assert moving_average([3.0, 5.0], 1) == [3.0, 5.0]
    assert moving_average([], 3) == []
    with pytest.raises(ValueError):
        moving_average([1.0], 0)
    assert [smoothing_window(n) for n in (1, 4, 5, 29, 30, 200)] == [1, 1, 3, 3, 3, 20]


def test_panels_are_those_whose_metrics_were_logged():
    titles = [panel.title for panel in select_panels(history())]
    assert titles == [
        "total reward",
        "reward components",
        "reward spread",
        "completion length",
        "completions cut at max_completion_length",
        "gradient norm",
        "learning rate",
    ]
    # KL appears only when logged (TRL logs it when beta != 0); a metric that is only NaN counts as not logged.
    logged = history(kl=0.01, entropy=1.5, **{"clip_ratio/low_mean": 0.0, "clip_ratio/low_min": 0.0})
    logged[0]["rewards/think_format/mean"] = math.nan
    panels = {panel.title: panel for panel in select_panels(logged)}
    assert {"KL to the reference model", "entropy", "clipped probability ratios"} <= set(panels)
    assert panels["clipped probability ratios"].series == (("clip_ratio/low_mean", "low_mean"),)
    assert panels["reward components"].series == (("rewards/numeric_accuracy/mean", "numeric_accuracy"),)
    assert not panels["learning rate"].smooth and panels["total reward"].smooth
    assert select_panels([{"step": 1, "train_runtime": 3.0}]) == []


def write_run_folder(path: Path, log_history: list[dict], finished: bool = True) -> Path:
    """A run folder as training writes it, by hand."""
    path.mkdir(parents=True)
    (path / "log_history.json").write_text(json.dumps(log_history))
    (path / "resolved_recipe.yaml").write_text(
        "# Resolved from recipes/default.yaml\n# trl: 1.16.0\nmodel:\n  name_or_path: models/x\n"
        "rewards:\n- name: numeric_accuracy\n  weight: 1.0\ntrainer:\n  max_steps: 30\n  learning_rate: 1.0e-05\n"
    )
    (path / "run_info.json").write_text(
        json.dumps({"recipe": "recipes/default.yaml", "world_size": 1, "versions": {"trl": "1.16.0"}})
    )
    (path / "eval_before.json").write_text(
        json.dumps({"accuracy": 0.25, "ci_low": 0.2, "ci_high": 0.3, "correct": 50, "total": 200})
    )
    if finished:
        time.sleep(0.01)  # the after-evaluation is written after the logs
        (path / "eval_after.json").write_text(
            json.dumps({"accuracy": 0.4, "ci_low": 0.33, "ci_high": 0.47, "correct": 80, "total": 200})
        )
        (path / "summary.json").write_text(
            json.dumps(
                {
                    "global_step": 30,
                    "train_seconds": 600.0,
                    "before": {"accuracy": 0.25},
                    "after": {"accuracy": 0.4},
                    "sampling": {"steps": 30, "zero_gradient_steps": 1},
                }
            )
        )
    return path


def test_report_of_a_hand_made_run_folder(tmp_path):
    run = write_run_folder(tmp_path / "run", history())
    written = write_report(run)
    assert [p.name for p in written] == [REPORT_PNG, "reward_curve.png", REPORT_MD]
    assert png_size(run / REPORT_PNG) == report_figure_pixels(7) == (1500, 1080)
    assert png_size(run / "reward_curve.png") == (700, 400)

    text = (run / REPORT_MD).read_text()
    assert "- recipe: `recipes/default.yaml`" in text
    assert "- steps: 30 of max_steps=30\n" in text
    assert "- wall time of training: 10 min 00 s, 20.0 s a step" in text
    assert "- steps with zero gradient: 1 of 30" in text
    # First and last 10 % = 3 steps: rewards 1/30..3/30 and 28/30..30/30.
    assert "Means over the first and the last 3 of the 30 logged steps" in text
    assert "| `reward` | 0.067 | 0.967 | +0.900 |" in text
    # No warm-up: GRPO's starting point is the base model itself.
    assert "| base model | 25.0 % [20.0, 30.0] (50/200) | [eval_before.json](eval_before.json) |" in text
    assert "| after GRPO | 40.0 % [33.0, 47.0] (80/200) | [eval_after.json](eval_after.json) |" in text
    assert "| GRPO | +15.0 points |" in text and text.count("steps with zero gradient: 1 of 30") == 1
    assert "| trl | 1.16.0 |" in text
    links = linked_files(text)
    assert REPORT_PNG in links and "reward_curve.png" in links
    assert all((run / link).exists() for link in links), links


def test_a_stopped_run_shows_no_stale_summary_or_after_evaluation(tmp_path):
    run = write_run_folder(tmp_path / "run", history(), finished=True)
    # Resumed to more steps, then stopped: the summary and the after-evaluation are the earlier run's.
    time.sleep(0.01)
    (run / "log_history.json").write_text(json.dumps(history(steps=40)))
    folder = read_run(run)
    assert folder.summary is None and folder.after is None and folder.before is not None
    text = (write_report(run)[-1]).read_text()
    assert "- steps: 40 of max_steps=30 (no summary.json for these steps" in text
    assert "| after GRPO | not evaluated | - |" in text and "eval_after.json" not in text
    assert "- wall time of training: 1 min 01 s" in text  # from the trainer's own train_runtime
    # Interrupted: no train_runtime either; the steps' own times add up.
    (run / "log_history.json").write_text(json.dumps(history(steps=40, step_time=3.0)[:-1]))
    text = (write_report(run)[-1]).read_text()
    assert "- time in the 40 logged steps: 2 min 00 s (the sum of `step_time`" in text


def test_a_finished_run_without_evaluation_shows_none_left_by_an_earlier_run(tmp_path):
    run = write_run_folder(tmp_path / "run", history())
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "before": None, "after": None}))
    text = write_report(run)[-1].read_text()
    assert "Held-out accuracy" not in text and "eval_before.json" not in text


def test_a_missing_empty_or_broken_run_folder_is_one_clear_error(tmp_path):
    with pytest.raises(RunFolderError, match="no such run folder"):
        write_report(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunFolderError, match="holds none of the files a run writes"):
        write_report(tmp_path / "empty")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "log_history.json").write_text("[{")
    with pytest.raises(RunFolderError, match="log_history.json: not valid JSON"):
        write_report(broken)

    result = run_script("report.py", str(tmp_path / "empty"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {tmp_path / 'empty'}: holds none of the files a run writes (log_history.json, summary.json, "
        "run_info.json, resolved_recipe.yaml, eval_base.json, eval_before.json, eval_after.json, eval_teacher.json)"
    ]
    assert not (tmp_path / "empty" / REPORT_MD).exists()


@pytest.mark.parametrize("disable_tqdm", [False, True])
def test_transformers_raw_log_dict_is_not_printed(tiny_model, tmp_path, capsys, disable_tqdm):
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from grpo_recipes.training.console import quiet_raw_logs

    args = TrainingArguments(
        output_dir=str(tmp_path), disable_tqdm=disable_tqdm, report_to="none", use_cpu=True
    )
    trainer = Trainer(model=AutoModelForCausalLM.from_pretrained(tiny_model), args=args)
    handler = trainer.callback_handler

    def printed_on_log() -> str:
        capsys.readouterr()
        handler.on_train_begin(args, trainer.state, trainer.control)
        handler.on_log(args, trainer.state, trainer.control, {"loss": 0.5, "reward": 0.25})
        handler.on_train_end(args, trainer.state, trainer.control)
        captured = capsys.readouterr()
        return captured.out + captured.err

    assert "'reward'" in printed_on_log()  # what transformers does by itself
    quiet_raw_logs(trainer)
    assert "'reward'" not in printed_on_log()
    kinds = [type(c) for c in handler.callbacks]
    assert PrinterCallback not in kinds and ProgressCallback not in kinds
    # The progress bar stays (as a subclass of transformers' own) unless tqdm is off.
    assert any(issubclass(kind, ProgressCallback) for kind in kinds) is not disable_tqdm


# tiny_run (conftest.py): one real 2-step run, shared with the training tests.


@pytest.mark.slow
def test_console_has_one_line_per_step_and_no_raw_dicts(tiny_run):
    _, _, result = tiny_run
    console = result.stdout + result.stderr
    steps = [line for line in console.splitlines() if line.startswith("step ")]
    assert [line.split("  ")[0] for line in steps] == ["step 1/2", "step 2/2"]
    assert all(re.search(r"reward \d\.\d{3}  zero-variance groups \d\.\d\d  mean length ", s) for s in steps)
    assert all(s.endswith(" s)") and " s/step" in s for s in steps)
    assert "'loss'" not in console and "'train_runtime'" not in console and "{'" not in console
    assert "2/2 [" in console  # the progress bar is still there


@pytest.mark.slow
def test_tensorboard_events_are_written_under_the_run_folder(tiny_run):
    _, out, _ = tiny_run
    events = list((out / "runs").rglob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events)


@pytest.mark.slow
def test_report_from_a_real_run_and_regenerated_by_the_script(tiny_run):
    _, out, _ = tiny_run
    log_history = json.loads((out / "log_history.json").read_text())
    panels = select_panels(log_history)
    titles = [panel.title for panel in panels]
    assert titles[:2] == ["total reward", "reward components"] and "entropy" in titles
    assert "KL to the reference model" not in titles  # beta is 0 by default: TRL logs no KL
    assert png_size(out / REPORT_PNG) == report_figure_pixels(len(panels))
    assert png_size(out / "reward_curve.png") == (700, 400)
    text = (out / REPORT_MD).read_text()
    links = linked_files(text)
    assert REPORT_PNG in links and "eval_after.json" in links and "runs/" in links
    assert all((out / link).exists() for link in links), links
    assert "- steps: 2 of max_steps=2\n" in text and "| `reward` |" in text

    for name in (REPORT_MD, REPORT_PNG, "reward_curve.png"):
        (out / name).unlink()
    result = run_script("report.py", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (out / REPORT_MD).read_text() == text
    assert png_size(out / REPORT_PNG) == report_figure_pixels(len(panels))
    assert png_size(out / "reward_curve.png") == (700, 400)


def test_report_table_and_curve(tmp_path):
    before = {"accuracy": 0.25, "ci_low": 0.2, "ci_high": 0.3, "correct": 50, "total": 200}
    after = {"accuracy": 0.40, "ci_low": 0.33, "ci_high": 0.47, "correct": 80, "total": 200}
    table = stages_table({"base": None, "before": before, "after": after})
    assert "  base model:  25.0 % [20.0, 30.0] (50/200)" in table and "  GRPO: +15.0 points" in table
    history = [{"step": i, "reward": i / 10, "zero_variance_groups": 0.5} for i in range(1, 8)] + [
        {"step": 7}
    ]
    assert reward_series(history) == (list(range(1, 8)), [i / 10 for i in range(1, 8)])
    assert plot_reward_curve(history, tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert plot_reward_curve([], tmp_path / "none.png") is None


def test_report_without_matplotlib_still_writes_report_md(tmp_path):
    """The GPU check's wheels leave matplotlib out: report.md is written, without plots or links to them."""
    run = write_run_folder(tmp_path / "run", history())
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"  # import matplotlib now raises ImportError
        "from grpo_recipes.evaluation.report import write_report\n"
        f"print([p.name for p in write_report({str(run)!r})])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"[{REPORT_MD!r}]"
    assert not (run / REPORT_PNG).exists() and not (run / "reward_curve.png").exists()
    text = (run / REPORT_MD).read_text()
    assert "| after GRPO | 40.0 % [33.0, 47.0] (80/200)" in text
    assert all((run / link).exists() for link in linked_files(text))
