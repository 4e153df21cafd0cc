"""`make smoke` runs offline: a Hub dataset is replaced by its local sample, or the run stops with one line."""

from __future__ import annotations

import json
import os
import sys

import pytest
from support import REPO, model_stub, stand_in_teacher

from grpo_recipes.launch.smoke import (
    is_hub_dataset,
    offline_data,
    run_without_exit_noise,
    smoke_overrides,
    smoke_sample,
)
from grpo_recipes.recipe import RecipeError, load_recipe
from grpo_recipes.training.train import check

RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_every_recipe_gets_local_data_that_passes_its_own_checks(path, capsys, monkeypatch):
    import huggingface_hub.constants

    # A tool or distillation recipe's check loads tokenizers: where the model is a Hub id (or, on a fresh clone,
    # the local SmolLM2 folder is not built yet), it fails at once instead of retrying the network.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    teacher = stand_in_teacher(path)
    recipe = load_recipe(path, teacher)
    overrides, note = offline_data(recipe)
    if is_hub_dataset(recipe.dataset.path):
        assert note and "replaced by its local sample" in note
    offline = load_recipe(path, [*teacher, *overrides])
    assert not is_hub_dataset(offline.dataset.path) and not is_hub_dataset(offline.dataset.eval_path)
    check(offline, load_data=True)  # the sample has the columns the prompt and every reward read
    assert capsys.readouterr().out.rstrip().endswith("OK")


def test_samples_have_the_hub_datasets_columns():
    columns = {
        "openai--gsm8k": {"question", "answer"},
        "DigitalLearningGmbH--MATH-lighteval": {"problem", "level", "type", "solution"},
        "HuggingFaceH4--MATH-500": {"problem", "solution", "answer", "subject", "level", "unique_id"},
        "open-r1--verifiable-coding-problems-python": {
            "source",
            "task_type",
            "in_source_id",
            "problem_statement",
            "gold_standard_solution",
            "problem_id",
            "metadata",
            "verification_info",
        },
    }
    assert {path.stem for path in (REPO / "recipes" / "data" / "smoke").glob("*.jsonl")} == set(columns)
    for name, expected in columns.items():
        rows = [json.loads(line) for line in (REPO / "recipes" / "data" / "smoke" / f"{name}.jsonl").open()]
        assert len(rows) >= 30 and all(set(row) == expected for row in rows), name
    assert smoke_sample("openai/gsm8k").is_file()


def test_a_hub_dataset_without_a_sample_is_one_line_naming_the_override():
    recipe = load_recipe(REPO / "recipes" / "gsm8k.yaml", ["dataset.path=someone/their-data"])
    with pytest.raises(RecipeError) as caught:
        offline_data(recipe)
    message = str(caught.value)
    assert "\n" not in message and "dataset.path" in message and "someone/their-data" in message
    assert 'ARGS="dataset.path=rows.jsonl dataset.eval_path=null dataset.eval_split=null' in message


def test_local_training_rows_with_a_hub_held_out_split_hold_out_from_the_local_rows(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"problem": f"{i} + 1", "solution": f"\\boxed{{{i + 1}}}"}) + "\n" for i in range(20)
        )
    )
    recipe = load_recipe(REPO / "recipes" / "math.yaml", [f"dataset.path={rows}", "dataset.config=null"])
    overrides, note = offline_data(recipe)
    assert overrides == ["dataset.eval_path=null", "dataset.eval_split=null"]
    assert "HuggingFaceH4/MATH-500" in note


def test_generated_and_local_recipes_need_nothing():
    assert offline_data(load_recipe(REPO / "recipes" / "default.yaml")) == ([], None)
    assert offline_data(load_recipe(REPO / "recipes" / "template.yaml")) == ([], None)


def test_a_tool_recipes_warm_up_is_cut_to_two_steps_and_other_recipes_get_no_warm_up_keys(tmp_path):
    path = REPO / "recipes" / "calculator-cpu.yaml"
    recipe = load_recipe(path, smoke_overrides(model_stub(tmp_path / "tiny"), "/tmp/out", "hf", warmup=True))
    assert (recipe.warmup.examples, recipe.warmup.max_steps, recipe.warmup.per_device_train_batch_size) == (
        4,
        2,
        2,
    )
    assert recipe.warmup.calls == load_recipe(path).warmup.calls  # what it demonstrates stays the recipe's
    assert [t.name for t in recipe.tools] == ["calculator"] and recipe.trainer["max_steps"] == 2
    assert not [o for o in smoke_overrides("/tmp/tiny", "/tmp/out", "hf") if o.startswith("warmup")]


def test_nanobind_exit_report_is_dropped_and_counted_and_everything_else_kept(capsys):
    """What triton's bindings print at exit in a vLLM run, twice (two ranks), around lines that must stay."""
    report = (
        'nanobind: leaked 4 instances!\n - leaked instance 0x1 of type "triton._C.libtriton.ir.attribute"\n'
        'nanobind: leaked 64 types!\n - leaked type "ATOMIC_OP"\n - ... skipped remainder\n'
        "nanobind: this is likely caused by a reference counting issue in the binding code.\n"
        "See https://nanobind.readthedocs.io/en/latest/refleaks.html"
    )
    # The second report starts right after the first one's link, as two ranks' reports do.
    script = (
        f"import sys; sys.stderr.write('before\\n' + {report!r} + 'after\\n' + {report!r} + {report!r} + '\\n');"
        " sys.exit(3)"
    )
    lines = []
    status = run_without_exit_noise([sys.executable, "-c", script], dict(os.environ), log=lines.append)
    assert status == 3
    assert capsys.readouterr().err == "before\nafter\n"
    assert lines == [
        "smoke: 3 process(es) printed nanobind's leak report at exit (triton's bindings, harmless: "
        "docs/troubleshooting.md)"
    ]
