"""scripts/slurm/train.sbatch without Slurm: stand-in srun/scontrol/accelerate/trl/curl record what they are given.

The srun stand-in records its argv, then runs the step's command as Slurm would on the node (with STANDIN_HOST
set to the node), so the accelerate and trl stand-ins record the command and environment each node really gets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import REPO

# Each test starts the script with a dozen stand-in processes: the file takes about two minutes.
pytestmark = pytest.mark.long

SCRIPT = REPO / "scripts" / "slurm" / "train.sbatch"
HOSTS = ["node-a", "node-b", "node-c"]
GSM8K_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"  # recipes/gsm8k.yaml's model.name_or_path

RECORD = """
import json, os, sys
def record(**fields):
    # One write per line, appended: concurrent stand-ins do not interleave.
    with open(os.environ["STANDIN_LOG"], "a") as log:
        log.write(json.dumps({"prog": os.path.basename(sys.argv[0]), "argv": sys.argv[1:],
                              "host": os.environ.get("STANDIN_HOST"),
                              "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                              "no_proxy": os.environ.get("NO_PROXY"),
                              "lora_updating": os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING"),
                              "adapter_dir": os.environ.get("GRPO_VLLM_ADAPTER_DIR"), **fields}) + "\\n")
"""

STANDINS = {
    "scontrol": """
record()
assert sys.argv[1:3] == ["show", "hostnames"], sys.argv
print("\\n".join(os.environ["STANDIN_HOSTS"].split()))
""",
    "srun": """
args = sys.argv[1:]
at, nodes, options = 0, [], set()
while args[at].startswith("-"):  # srun's own options come before the step's command
    if args[at] == "-w":
        nodes = args[at + 1].split(",")
        at += 1
    else:
        options.add(args[at])
    at += 1
record(node=",".join(nodes))
command = args[at:]
if len(nodes) == 1:  # one task: run it in this process, as the server's step does
    if nodes[0] == os.environ.get("STANDIN_FAIL_HOST"):
        sys.exit(3)
    os.environ.update(STANDIN_HOST=nodes[0], SLURMD_NODENAME=nodes[0], SLURM_PROCID="0")
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # Slurm gives the step its own GPUs: one exported before is lost
    os.execvp(command[0], command)
# One task per node; a node named by STANDIN_FAIL_HOST fails at once. Slurm numbers a step's tasks in its own
# node order, which need not be the order of -w: here the reverse, so a script that took SLURM_PROCID for the
# machine rank would put rank 0 on the wrong node.
import subprocess, time
assert {f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1"} <= options, options
tasks = []
for rank, node in enumerate(nodes):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update(STANDIN_HOST=node, SLURMD_NODENAME=node, SLURM_PROCID=str(len(nodes) - 1 - rank))
    failing = node == os.environ.get("STANDIN_FAIL_HOST")
    tasks.append(subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"] if failing else command, env=env))
# As Slurm: with --kill-on-bad-exit=1 the first task to fail ends the others; without it every task runs on.
kill_on_bad_exit = "--kill-on-bad-exit=1" in options
status, reported = 0, set()
while True:
    codes = [task.poll() for task in tasks]
    for rank, code in enumerate(codes):
        if code and rank not in reported:
            reported.add(rank)
            print(f"srun: error: {nodes[rank]}: task {rank}: Exited with exit code {code}", file=sys.stderr)
            status = status or code
            if kill_on_bad_exit:
                for other in tasks:
                    if other.poll() is None:
                        other.kill()
    if None not in codes:
        break
    time.sleep(0.05)
sys.exit(status)
""",
    "accelerate": """
record()
import time
time.sleep(float(os.environ.get("STANDIN_TRAIN_SECONDS", "0")))
""",
    "trl": """
record()
import time
time.sleep(float(os.environ.get("STANDIN_SERVER_SECONDS", "0")))
sys.exit(int(os.environ.get("STANDIN_SERVER_RC", "0")))
""",
    "curl": """
record()
sys.exit(int(os.environ.get("STANDIN_CURL_RC", "0")))
""",
}


@pytest.fixture
def launcher(tmp_path):
    """Run the script with the stand-ins first on PATH; returns (CompletedProcess, records)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STANDINS.items():
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{RECORD}\n{body}")
        path.chmod(0o755)
    log = tmp_path / "log.jsonl"

    def run(hosts=HOSTS, timeout=60, **env):
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "VLLM_", "STANDIN_"))
            and k
            not in {
                "RECIPE",
                "ARGS",
                "ACCELERATE_CONFIG",
                "GPUS_PER_NODE",
                "MASTER_PORT",
                "GRPO_VLLM_ADAPTER_DIR",
            }
        }
        base.update(
            PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            PYTHON=sys.executable,
            STANDIN_LOG=str(log),
            STANDIN_HOSTS=" ".join(hosts),
            SLURM_JOB_NODELIST="node-[a-c]",
            # The Hub models' configs are out of reach here: say so at once instead of retrying for 40 s.
            HF_HUB_OFFLINE="1",
        )
        base.update(env)
        log.write_text("")
        result = subprocess.run(
            ["bash", str(SCRIPT)], cwd=REPO, env=base, capture_output=True, text=True, timeout=timeout
        )
        records = [json.loads(line) for line in log.read_text().splitlines()]
        return result, records

    return run


def of(records, prog):
    return [r for r in records if r["prog"] == prog]


def option(argv, name):
    return argv[argv.index(name) + 1]


def check_training(records, hosts, gpus, script_args):
    """Every training node ran accelerate once, with its rank, the global totals and the recipe arguments."""
    runs = of(records, "accelerate")
    assert sorted(r["host"] for r in runs) == sorted(hosts)
    for run in runs:
        argv = run["argv"]
        assert argv[0] == "launch" and option(argv, "--config_file") == "configs/zero2.yaml"
        assert int(option(argv, "--machine_rank")) == hosts.index(run["host"])
        assert int(option(argv, "--num_processes")) == len(hosts) * gpus
        assert int(option(argv, "--num_machines")) == len(hosts)
        assert option(argv, "--main_process_ip") == hosts[0]
        assert option(argv, "--main_process_port") == "29500"
        assert option(argv, "--rdzv_backend") == "static"
        assert argv[argv.index("scripts/train.py") :] == ["scripts/train.py", *script_args]
    assert sorted(int(option(r["argv"], "--machine_rank")) for r in runs) == list(range(len(hosts)))


def test_plain_multi_node_launches_one_rank_per_node_with_global_totals(launcher):
    result, records = launcher(
        RECIPE="math", ARGS="trainer.max_steps=10 trainer.learning_rate=2e-6", SLURM_GPUS_ON_NODE="4"
    )
    assert result.returncode == 0, result.stderr
    assert [r["argv"] for r in of(records, "scontrol")] == [["show", "hostnames", "node-[a-c]"]]
    check_training(
        records,
        HOSTS,
        gpus=4,
        script_args=["--config", "math", "trainer.max_steps=10", "trainer.learning_rate=2e-6"],
    )
    # One srun step, one task on each node, ended everywhere by the first to fail; nothing else started.
    (srun,) = of(records, "srun")
    assert srun["argv"][:7] == [
        "--nodes=3",
        "--ntasks=3",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--wait=0",
        "-w",
        "node-a,node-b,node-c",
    ]
    assert not of(records, "trl") and not of(records, "curl")
    # The command is printed exactly as it ran.
    assert f"srun {' '.join(srun['argv'])}" in result.stdout.splitlines()


@pytest.mark.parametrize(
    ("env", "gpus"), [({}, 8), ({"SLURM_GPUS_ON_NODE": "2"}, 2), ({"GPUS_PER_NODE": "6"}, 6)]
)
def test_gpus_per_node_defaults_to_slurms_count_then_8(launcher, env, gpus):
    result, records = launcher(**env)
    assert result.returncode == 0, result.stderr
    check_training(records, HOSTS, gpus=gpus, script_args=["--config", "gsm8k"])


def test_server_mode_serves_on_the_last_node_and_trains_on_the_others(launcher):
    result, records = launcher(
        VLLM_SERVER="1", VLLM_GPUS="4", VLLM_PORT="8123", SLURM_GPUS_ON_NODE="8", ARGS="trainer.max_steps=5"
    )
    assert result.returncode == 0, result.stderr
    servers = of(records, "trl")
    assert len(servers) == 1
    server = servers[0]
    assert server["host"] == "node-c" and server["cuda"] == "0,1,2,3"
    assert server["argv"] == [
        "vllm-serve",
        "--model",
        GSM8K_MODEL,
        "--host",
        "0.0.0.0",
        "--port",
        "8123",
        "--tensor-parallel-size",
        "4",
    ]
    server_overrides = [
        "trainer.use_vllm=true",
        "trainer.vllm_mode=server",
        "trainer.vllm_server_host=node-c",
        "trainer.vllm_server_port=8123",
    ]
    check_training(
        records,
        ["node-a", "node-b"],
        gpus=8,
        script_args=["--config", "gsm8k", "trainer.max_steps=5", *server_overrides],
    )
    # Training starts only after the server answered its health check.
    curls = [i for i, r in enumerate(records) if r["prog"] == "curl"]
    trainers = [i for i, r in enumerate(records) if r["prog"] == "srun" and r["node"] != "node-c"]
    assert len(curls) == 1 and "http://node-c:8123/health" in records[curls[0]]["argv"]
    assert curls[0] < min(trainers)


def test_server_mode_defaults_to_one_gpu_and_the_overridden_model(launcher):
    result, records = launcher(VLLM_SERVER="1", SLURM_GPUS_ON_NODE="2", ARGS="model.name_or_path=org/other")
    assert result.returncode == 0, result.stderr
    (server,) = of(records, "trl")
    assert server["cuda"] == "0"  # one GPU divides any model's heads; the note says the other sits idle
    assert "the server uses 1 of its node's 2 GPUs; the others sit idle" in result.stderr
    assert option(server["argv"], "--model") == "org/other"
    assert option(server["argv"], "--tensor-parallel-size") == "1"
    assert option(server["argv"], "--port") == "8000"
    assert {r["host"] for r in of(records, "accelerate")} == {"node-a", "node-b"}
    assert all(option(r["argv"], "--num_processes") == "4" for r in of(records, "accelerate"))


def test_a_lora_recipes_server_takes_the_adapter_from_a_folder_the_trainers_share(launcher, tmp_path):
    """gsm8k-lora (rank 16): the server starts with LoRA enabled and adapters loadable at run time, and every
    trainer writes its adapters to the same folder under the submission directory (both nodes see it)."""
    result, records = launcher(VLLM_SERVER="1", RECIPE="gsm8k-lora", SLURM_JOB_ID="77")
    assert result.returncode == 0, result.stderr
    (server,) = of(records, "trl")
    assert server["argv"][-7:] == [
        "--enable-lora",
        "--max-lora-rank",
        "16",
        "--max-loras",
        "1",
        "--max-cpu-loras",
        "2",
    ]
    assert server["lora_updating"] == "1"
    folder = str(REPO / "outputs" / "vllm-adapters-77")
    assert {r["adapter_dir"] for r in of(records, "accelerate")} == {folder}
    # Without LoRA (gsm8k), neither: the merged weights travel over NCCL.
    result, records = launcher(VLLM_SERVER="1")
    (server,) = of(records, "trl")
    assert "--enable-lora" not in server["argv"] and server["lora_updating"] is None
    assert {r["adapter_dir"] for r in of(records, "accelerate")} == {None}


@pytest.mark.parametrize("failing", ["node-a", "node-c"])
def test_a_failing_node_fails_the_job(launcher, failing):
    result, records = launcher(STANDIN_FAIL_HOST=failing)
    assert result.returncode == 3
    assert f"srun: error: {failing}: task" in result.stderr
    assert "error: training failed with status 3" in result.stderr
    # The failing node never trained (the others may have started before the step ended them).
    assert failing not in {r["host"] for r in of(records, "accelerate")}


def test_a_failing_node_stops_the_others_instead_of_leaving_them_waiting(launcher):
    # The other nodes would train for 120 s (in a real job: wait in a collective until NCCL's timeout).
    # The script returns within the timeout only because the step asked Slurm to end them (the stand-in srun
    # runs every task to its end without --kill-on-bad-exit=1).
    result, records = launcher(STANDIN_FAIL_HOST="node-b", STANDIN_TRAIN_SECONDS="120", timeout=30)
    assert result.returncode == 3
    assert "srun: error: node-b: task 1: Exited with exit code 3" in result.stderr
    assert "node-b" not in {r["host"] for r in of(records, "accelerate")}


def test_server_that_never_answers_fails_without_training_and_is_stopped(launcher):
    # The server would run for 120 s: the script only returns within the timeout if it killed it.
    result, records = launcher(
        VLLM_SERVER="1", VLLM_TIMEOUT="0", STANDIN_CURL_RC="7", STANDIN_SERVER_SECONDS="120", timeout=30
    )
    assert result.returncode != 0
    assert "no answer from http://node-c:8000/health" in result.stderr
    assert not of(records, "accelerate")


def test_server_that_exits_early_fails_without_training(launcher):
    result, records = launcher(VLLM_SERVER="1", STANDIN_CURL_RC="7", STANDIN_SERVER_RC="1", timeout=30)
    assert result.returncode != 0
    assert "the vLLM server exited" in result.stderr
    assert not of(records, "accelerate")


@pytest.mark.parametrize(("env", "message"), [({}, "needs 2 nodes"), ({"VLLM_GPUS": "9"}, "VLLM_GPUS=9")])
def test_server_mode_rejects_impossible_splits(launcher, env, message):
    hosts = ["node-a"] if not env else HOSTS
    result, records = launcher(hosts=hosts, VLLM_SERVER="1", **env)
    assert result.returncode != 0 and message in result.stderr
    assert not of(records, "srun")


def _model_with_heads(folder, heads: int, kv_heads: int = 2):
    """A model folder with only a config: `heads` attention heads (Qwen2.5-1.5B has 12, 0.5B 14)."""
    from transformers import AutoConfig

    AutoConfig.for_model(  # the MLP of Qwen2.5-1.5B (8,960 units: 6 does not divide it)
        "qwen2",
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        hidden_size=8 * heads,
        intermediate_size=8960,
    ).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("heads", "gpus", "refused"),
    [(12, 8, "choose one of 1, 2, 4."), (14, 4, "choose one of 1, 2."), (12, 4, None), (14, 2, None)],
)
def test_server_tensor_parallel_size_must_divide_the_models_attention_heads(
    launcher, tmp_path, heads, gpus, refused
):
    model = _model_with_heads(tmp_path / f"heads{heads}", heads)
    result, records = launcher(VLLM_SERVER="1", VLLM_GPUS=str(gpus), ARGS=f"model.name_or_path={model}")
    if refused:
        assert result.returncode != 0 and not of(records, "srun")  # refused before anything starts
        assert (
            f"error: VLLM_GPUS={gpus}: {model} has {heads} attention heads (2 key/value) and an MLP of 8960"
            in result.stderr
        )
        assert refused in result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert option(of(records, "trl")[0]["argv"], "--tensor-parallel-size") == str(gpus)


@pytest.mark.parametrize(
    ("model", "gpus", "sizes"),
    [("Qwen/Qwen2.5-1.5B-Instruct", 8, "1, 2, 4"), ("Qwen/Qwen2.5-0.5B-Instruct", 4, "1, 2")],
)
def test_a_recipes_hub_model_is_checked_without_the_hub(launcher, model, gpus, sizes):
    """A login node that cannot reach the Hub (HF_HUB_OFFLINE here) still refuses the size from the model's
    known shape: gsm8k, the script's default, on 8 server GPUs would die at server start."""
    result, records = launcher(VLLM_SERVER="1", VLLM_GPUS=str(gpus), ARGS=f"model.name_or_path={model}")
    assert result.returncode != 0 and not of(records, "srun")
    assert f"error: VLLM_GPUS={gpus}: {model} has" in result.stderr
    assert f"choose one of {sizes}." in result.stderr


def test_a_cluster_proxy_is_bypassed_for_the_server(launcher):
    result, records = launcher(VLLM_SERVER="1", http_proxy="http://127.0.0.1:9", NO_PROXY="localhost")
    assert result.returncode == 0, result.stderr
    (curl,) = of(records, "curl")
    assert option(curl["argv"], "--noproxy") == "node-c"
    assert all(r["no_proxy"] == "node-c,localhost" for r in of(records, "accelerate"))


def test_outside_an_allocation_it_says_so(launcher):
    result, _ = launcher(SLURM_JOB_NODELIST="")
    assert result.returncode != 0 and "Slurm allocation" in result.stderr


def test_sbatch_header_comes_before_any_command():
    # sbatch stops reading #SBATCH lines at the first command.
    lines = SCRIPT.read_text().splitlines()
    first_command = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    sbatch = [i for i, line in enumerate(lines) if line.startswith("#SBATCH")]
    assert sbatch and max(sbatch) < first_command
    assert "#SBATCH --output=outputs/slurm-%j.out" in lines
