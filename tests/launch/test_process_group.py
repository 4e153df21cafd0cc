"""A finished run leaves the process group on every process (a gloo group left to the interpreter's
teardown can abort a finished process with SIGABRT and fail the whole launch)."""

from __future__ import annotations

import argparse

import torch.distributed as dist

from grpo_recipes.cli import run_with_recipe


def test_a_finished_run_leaves_the_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    seen = []
    args = argparse.Namespace(config="default", overrides=[])
    try:
        assert run_with_recipe(args, lambda recipe: seen.append(dist.is_initialized())) == 0
        assert seen == [True]  # the body ran inside the group
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_a_bad_recipe_leaves_the_group_alone(tmp_path):
    """After an error the other processes may never reach a barrier: no collective call is made."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    args = argparse.Namespace(config="default", overrides=["trainer.learning_rat=1"])
    try:
        assert run_with_recipe(args, lambda recipe: None) == 2
        assert dist.is_initialized()
    finally:
        dist.destroy_process_group()
