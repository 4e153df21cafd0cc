"""Tool rounds across processes: 2 real processes where one calls the calculator and the other does not.

Each run is tests/training/tool_rounds_probe.py under `accelerate launch` with a shipped config (`--num_processes
2 --mixed_precision no`, no GPU visible: gloo): the tiny model generates for real and its completions are
replaced by scripted ones, so that in step 1 process 0 makes two tool rounds (two completions call the
calculator, then one of them again) while process 1 makes none, and in step 2 process 1 calls once while
process 0 again calls three times. RecipeGRPOTrainer has every process join every generation round; TRL's
own GRPOTrainer lets process 1 leave, which under ZeRO-3 leaves process 0 alone in the weight gather.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from support import REPO, run_in_own_group

from grpo_recipes.ports import free_port

pytestmark = pytest.mark.smoke

PROBE = Path(__file__).with_name("tool_rounds_probe.py")
CONFIGS = {"ddp": "ddp.yaml", "zero2": "zero2.yaml", "zero3": "zero3.yaml"}
ANSWER = "says: the answer is 3."


def launch(model: Path, out: Path, dist: str, *extra: str, timeout: float) -> tuple[int | None, str, float]:
    """Run the probe on 2 processes; returns (exit status or None after a timeout, its output, seconds).

    The launch runs in a process group of its own, killed whole on a timeout, so a hung run leaves nothing."""
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(REPO / "configs" / CONFIGS[dist]),
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        "--main_process_port",
        str(free_port()),
        str(PROBE),
        str(model),
        str(out),
        *extra,
    ]
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    started = time.time()
    status, output, _ = run_in_own_group(command, env, timeout, merge_output=True)
    return status, output, time.time() - started


def records(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def check_rounds(out: Path, trainer: str = "RecipeGRPOTrainer") -> None:
    """What each process generated, called and was rewarded for, step by step (see the module docstring)."""
    rank0, rank1 = records(out)
    assert rank0["trainer"] == rank1["trainer"] == trainer

    # Tool calls made by each process, cumulative after each step: 3 and 0 in step 1, then 3 and 1.
    assert rank0["tool_calls"] == [3, 6]
    assert rank1["tool_calls"] == [0, 1]

    # Every process took part in every generation round: the first generation (2 completions each), then
    # rounds of as many prompts as the process with the most had (process 1 padded to them).
    for record in (rank0, rank1):
        calls = [(g["step"], g["prompts"]) for g in record["generations"]]
        assert calls == [(0, 2), (0, 2), (0, 1), (1, 2), (1, 2), (1, 1)], record["generations"]
    # Process 0's prompts really held the tool's results (one, then two); process 1's padding copied its
    # own prompts: none in step 1; in step 2 its one called prompt and a copy of it, then its first prompt.
    assert [g["rounds"] for g in rank0["generations"]] == [[0, 0], [1, 1], [2]] * 2
    assert [g["rounds"] for g in rank1["generations"]] == [[0, 0], [0, 0], [0], [0, 0], [1, 1], [0]]

    # The completions each process was rewarded for are its own (the padding's were dropped): the calls,
    # the calculator's results and the answer the script wrote for that process.
    for step in (0, 1):
        mine = [c["rows"] for c in rank0["completions"] if c["step"] == step]
        assert mine == [
            [
                {"tool_results": ["3", "3"], "last": f"Process 0 {ANSWER}"},
                {"tool_results": ["3"], "last": f"Process 0 {ANSWER}"},
            ]
        ]
    expected1 = {
        0: [{"tool_results": [], "last": f"Process 1 {ANSWER}"}] * 2,
        1: [
            {"tool_results": ["3"], "last": f"Process 1 {ANSWER}"},
            {"tool_results": [], "last": f"Process 1 {ANSWER}"},
        ],
    }
    for step, rows in expected1.items():
        assert [c["rows"] for c in rank1["completions"] if c["step"] == step] == [rows]

    # TRL's own count over both processes: calls per completion (4 completions per step).
    history = json.loads((out / "log_history.json").read_text())
    steps = [h for h in history if "tools/call_frequency" in h]
    assert [h["step"] for h in steps] == [1, 2]
    assert [h["tools/call_frequency"] for h in steps] == [pytest.approx(3 / 4), pytest.approx(4 / 4)]
    assert all(h["tools/failures"] == 0 and h["tools/failure_frequency"] == 0 for h in steps)


RUNS = [("ddp", "hf"), ("zero2", "hf"), ("zero3", "hf"), ("zero3", "vllm-colocate")]


@pytest.mark.parametrize("dist, gen", RUNS, ids=[f"{d}-{g}" for d, g in RUNS])
def test_processes_with_different_tool_rounds_train_together(tiny_model, tmp_path, dist, gen):
    if gen != "hf":
        pytest.importorskip("vllm")
    out = tmp_path / "run"
    status, output, seconds = launch(tiny_model, out, dist, "--gen", gen, timeout=600)
    assert status == 0, output[-5000:]
    kind = "MULTI_CPU" if dist == "ddp" else "DEEPSPEED"
    assert f"[rank 0] RecipeGRPOTrainer, {gen}, DistributedType.{kind}" in output
    check_rounds(out)
    print(f"{dist} {gen}: {seconds:.0f} s")


def test_server_mode_gets_each_process_its_own_completions(tiny_model, tmp_path):
    """Server mode gathers every process's prompts into one request and hands each process its slice back by
    position: with the padded rounds every process gets exactly its own completions. TRL's own trainer, on
    the same server, dies at the first tool round (the processes' gathers no longer match)."""
    pytest.importorskip("vllm")
    from grpo_recipes.launch.serve import Server, serve_command

    port = free_port()
    command, env = serve_command(str(tiny_model), port=port, extra={"max_model_len": 1024})
    server_log = tmp_path / "vllm-server.log"
    out, plain = tmp_path / "run", tmp_path / "plain"
    server_args = ("--gen", "vllm-server", "--port", str(port))
    with Server(command, {**env, "CUDA_VISIBLE_DEVICES": ""}, f"http://127.0.0.1:{port}", server_log):
        status, output, seconds = launch(tiny_model, out, "zero3", *server_args, timeout=600)
        plain_status, plain_output, plain_seconds = launch(
            tiny_model, plain, "zero3", "--plain", *server_args, timeout=300
        )
    assert status == 0, output[-5000:]
    assert "[rank 0] RecipeGRPOTrainer, vllm-server, DistributedType.DEEPSPEED" in output
    check_rounds(out)
    assert "/collective_rpc" in server_log.read_text()  # the weights went to the server after each step
    assert "[rank 0] GRPOTrainer, vllm-server, DistributedType.DEEPSPEED" in plain_output
    assert plain_status != 0 and not (plain / "log_history.json").exists(), plain_output[-3000:]
    print(f"zero3 vllm-server: {seconds:.0f} s; TRL's own: status {plain_status} after {plain_seconds:.0f} s")


def test_trl_own_trainer_does_not_finish_the_same_run_under_zero3(tiny_model, tmp_path):
    """The failure RecipeGRPOTrainer fixes: with TRL's GRPOTrainer, process 1 leaves the tool loop while
    process 0 gathers the ZeRO-3 weights for its next round, and the run dies (or hangs, killed here)."""
    out = tmp_path / "plain"
    status, output, seconds = launch(tiny_model, out, "zero3", "--plain", timeout=300)
    assert "[rank 0] GRPOTrainer, hf, DistributedType.DEEPSPEED" in output
    assert status != 0, output[-3000:]  # None: still running after 300 s
    assert not (out / "log_history.json").exists()
    print(f"plain zero3: status {status} after {seconds:.0f} s")
