"""Dynamic sampling: the group filter, the batch it builds under one or several processes, TRL's hooks, real runs."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from grpo_recipes.recipe import RecipeError, load_recipe
from grpo_recipes.training.dynamic_sampling import (
    concat_rows,
    fresh_inputs,
    generate_informative,
    informative_groups,
    select_groups,
)
from tests.support import REPO

G = 4


def trl_advantages(rewards: list[float]) -> torch.Tensor:
    """Advantages as TRL 1.16 computes them by default: (reward - group mean) / (group std + 1e-4), float32."""
    grouped = torch.tensor(rewards, dtype=torch.float32).view(-1, G)
    mean, std = grouped.mean(dim=1, keepdim=True), grouped.std(dim=1, keepdim=True)
    return ((grouped - mean) / (std + 1e-4)).view(-1)


@pytest.mark.parametrize(
    ("rewards", "informative"),
    [
        ([0, 0, 0, 0], [False]),  # all wrong
        ([1, 1, 1, 1], [False]),  # all right
        ([0.1, 0.1, 0.1, 0.1], [False]),  # equal and non-zero: the mean is off by an ulp
        ([0.7, 0.7, 0.7, 0.7, 0, 1, 0, 0], [False, True]),
        ([1, 0, 0, 0, 0.3, 0.3, 0.3, 0.30001], [True, True]),
    ],
)
def test_group_filter(rewards, informative):
    assert informative_groups(trl_advantages(rewards), G).tolist() == informative


def test_selection_prefers_informative_groups_and_tops_up_at_the_bound():
    rounds = [torch.tensor([False, True, False]), torch.tensor([True, False, True])]
    selection = select_groups(rounds, 3)
    assert selection.picks == [(0, [1]), (1, [0, 2])]
    assert (selection.groups_generated, selection.groups_kept, selection.extra_rounds) == (6, 3, 1)
    short = select_groups([torch.tensor([False, True]), torch.tensor([False, False])], 2)
    assert short.picks == [(0, [0, 1])] and short.groups_kept == 1  # the bound was hit


def test_rows_of_several_rounds_are_padded_on_the_right_side():
    first = {
        "prompt_ids": torch.tensor([[5, 6]]),
        "completion_ids": torch.tensor([[7]]),
        "tool_mask": torch.tensor([[1]]),
    }
    second = {
        "prompt_ids": torch.tensor([[1, 2, 3]]),
        "completion_ids": torch.tensor([[8, 9]]),
        "tool_mask": torch.tensor([[1, 0]]),
    }
    merged = concat_rows([first, second], pad_token_id=0)
    assert merged["prompt_ids"].tolist() == [[0, 5, 6], [1, 2, 3]]  # prompts are left-padded
    assert merged["completion_ids"].tolist() == [[7, 0], [8, 9]]
    assert merged["tool_mask"].tolist() == [[1, 1], [1, 0]]


def test_fresh_prompts_are_whole_groups_shared_by_the_processes():
    dataset = [{"prompt": f"p{i}"} for i in range(50)]
    slices = [fresh_inputs(dataset, groups=3, group_size=G, seed=7, rank=r, local_size=6) for r in (0, 1)]
    rows = [row["prompt"] for part in slices for row in part]
    assert len(rows) == 12 and all(len(set(rows[g * G : (g + 1) * G])) == 1 for g in range(3))
    assert rows == [
        r["prompt"] for part in [fresh_inputs(dataset, 3, G, 7, r, 6) for r in (0, 1)] for r in part
    ]


class SimulatedProcess:
    """One rank of a world of 2: `generate` hands out its slice of a prepared global round, and `gather`
    returns the whole round, as accelerate's gather would."""

    def __init__(self, rank: int, rounds: list[dict[str, torch.Tensor]], local: int):
        self.rank, self.rounds, self.local, self.calls = rank, rounds, local, 0
        self.accelerator = SimpleNamespace(
            num_processes=2,
            process_index=rank,
            pad_across_processes=lambda tensor, **_: tensor,
            gather=self.gather,
        )
        self._globals: dict[int, torch.Tensor] = {}

    def generate(self, inputs):
        global_round = self.rounds[self.calls]
        self.calls += 1
        mine = slice(self.rank * self.local, (self.rank + 1) * self.local)
        out = {key: value[mine] for key, value in global_round.items()}
        self._globals = {id(out[key]): value for key, value in global_round.items()}
        return {**out, "num_items_in_batch": torch.tensor(-1)}

    def gather(self, tensor):
        return self._globals[id(tensor)]


def _round(rewards: list[float], prompt_len: int, tag: int) -> dict[str, torch.Tensor]:
    n = len(rewards)
    return {
        "prompt_ids": torch.full((n, prompt_len), tag),
        "prompt_mask": torch.ones(n, prompt_len, dtype=torch.long),
        "completion_ids": torch.arange(n).unsqueeze(1).repeat(1, 3) + 100 * tag,
        "completion_mask": torch.ones(n, 3, dtype=torch.long),
        "advantages": trl_advantages(rewards),
    }


def test_two_processes_build_the_same_batch_of_informative_groups():
    # Two groups of 4 per round, each split 2 + 2... no: 4 completions per process, so each group sits on one
    # process in round 0 and the layout is decided on the gathered batch either way.
    rounds = [
        _round([0, 0, 0, 0, 1, 0, 1, 0], prompt_len=2, tag=1),  # group 0 equal, group 1 informative
        _round([1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5], prompt_len=3, tag=2),  # nothing new
        _round([0, 1, 1, 1, 1, 1, 1, 1], prompt_len=2, tag=3),  # group 0 informative
    ]
    dataset = [{"prompt": f"p{i}"} for i in range(20)]
    results = []
    for rank in (0, 1):
        process = SimulatedProcess(rank, rounds, local=4)
        trainer = SimpleNamespace(
            accelerator=process.accelerator,
            num_generations=G,
            processing_class=SimpleNamespace(pad_token_id=0),
            args=SimpleNamespace(seed=0),
            state=SimpleNamespace(global_step=5),
            train_dataset=dataset,
        )
        inputs = [{"prompt": "x"}] * 4
        output, selection = generate_informative(trainer, inputs, process.generate, max_rounds=4)
        assert process.calls == 3  # stopped as soon as 2 informative groups were in hand
        results.append((output, selection))
    (first, selection), (second, _) = results
    assert (selection.groups_generated, selection.groups_kept, selection.extra_rounds) == (6, 2, 2)
    assert selection.zero_variance_groups == 0.0
    whole = {key: torch.cat([first[key], second[key]]) for key in first if key != "num_items_in_batch"}
    assert informative_groups(whole["advantages"], G).all()  # no equal-reward group is trained on
    assert whole["completion_ids"][:, 0].tolist() == [104, 105, 106, 107, 300, 301, 302, 303]
    assert whole["prompt_ids"].shape == (8, 2) and whole["prompt_ids"][:, -1].tolist() == [1] * 4 + [3] * 4
    assert first["num_items_in_batch"].item() == second["num_items_in_batch"].item() == 8 * 3


def test_trl_still_has_what_dynamic_sampling_relies_on():
    """Fails loudly when a TRL upgrade changes the hook: the method, its call site and its output."""
    import trl
    from trl import GRPOTrainer

    from grpo_recipes.training.trainer import RecipeGRPOTrainer

    assert list(inspect.signature(GRPOTrainer._generate_and_score_completions).parameters) == [
        "self",
        "inputs",
    ]
    prepare = inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "self._generate_and_score_completions(generation_batch)" in prepare, trl.__version__
    assert "split_tensor_dict(generation_batch, self.args.steps_per_generation)" in prepare
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for needed in ('"advantages": advantages', '"completion_mask": completion_mask', '"num_items_in_batch"'):
        assert needed in source, (needed, trl.__version__)
    assert "self.accelerator.process_index * len(prompts)" in source  # the gathered layout: process order
    assert "self._metrics[mode]" in source
    assert (
        RecipeGRPOTrainer._generate_and_score_completions is not GRPOTrainer._generate_and_score_completions
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sampling.dynamic=maybe", "sampling.dynamic: expected true or false, got 'maybe'."),
        ("sampling.max_rounds=100", "sampling.max_rounds: must be between 0 and 64, got 100."),
        ("sampling.rounds=2", "sampling: unknown key 'rounds'"),
    ],
)
def test_sampling_section_is_checked(override, message):
    with pytest.raises(RecipeError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_recipe(REPO / "recipes" / "default.yaml", [override], check_trainer=False)


def _real_run(tmp_path, processes: int) -> list[dict]:
    out = tmp_path / f"run{processes}"
    launch = [sys.executable, "-m", "accelerate.commands.launch"]
    if processes > 1:
        launch += [
            "--config_file",
            str(REPO / "configs" / "cpu_2proc.yaml"),
            "--num_processes",
            str(processes),
        ]
    else:
        launch += ["--cpu", "--num_processes", "1"]
    per_device = 8 // processes  # two groups of 4 per round, whatever the number of processes
    command = [
        *launch,
        str(REPO / "scripts" / "train.py"),
        "--config",
        "default",
        "--no-resume",
        "warmup=null",  # the base model: its groups mix right and wrong answers without one
        "sampling.dynamic=true",
        "sampling.max_rounds=3",
        "trainer.max_steps=2",
        f"trainer.per_device_train_batch_size={per_device}",
        "trainer.num_generations=4",
        "trainer.max_completion_length=16",
        "trainer.save_steps=100",
        f"trainer.output_dir={out}",
        "evaluation.enabled=false",
    ]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert json.loads((out / "run_info.json").read_text())["world_size"] == processes
    return [h for h in json.loads((out / "log_history.json").read_text()) if "groups_generated" in h]


@pytest.mark.smoke
@pytest.mark.parametrize("processes", [1, 2])
def test_real_runs_train_on_informative_groups_only(tmp_path, processes):
    """SmolLM2 on the default task samples right and wrong answers, so some groups are equal and some are not."""
    history = _real_run(tmp_path, processes)
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        assert h["groups_generated"] == 2 * (1 + h["extra_rounds"]) and 0 <= h["extra_rounds"] <= 3
        assert h["groups_kept"] == 2 * (1 - h["zero_variance_groups"])  # the counts add up
        if h["extra_rounds"] < 3:
            assert h["zero_variance_groups"] == 0.0  # no equal-reward group was trained on
        assert "zero_variance_groups_generated" in h
