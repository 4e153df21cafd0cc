"""Helpers shared by the test modules: paths, running the scripts as a user would, tiny recipes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


# The smallest valid recipe: every test that needs one starts from a copy.
MINIMAL = {
    "model": {"name_or_path": "some/model"},
    "dataset": {"generator": {"name": "arithmetic"}},
    "prompt": {"user": "Calculate {question}.", "solution_column": "answer"},
    "rewards": [{"name": "numeric_accuracy"}],
}


def alive(pid: int) -> bool:
    """Whether a process with this id still exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def run_in_own_group(command: list[str], env: dict, timeout: float, merge_output: bool = False):
    """Run `command` from the repository root in a process group of its own; returns (exit status, or None
    when it ran past `timeout`, stdout, stderr). On a timeout the whole group is killed, so that a hung run
    leaves no launcher workers or vLLM engines behind for the rest of the suite. With `merge_output`, stderr
    goes into stdout (and "" is returned for it)."""
    with subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_output else subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            status = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            status = None
    return status, stdout, stderr or ""


def run_script(script: str, *args: str, timeout: float = 600, extra_env: dict | None = None, launcher=None):
    """Run one of scripts/ as a user would, from the repository root; returns the CompletedProcess.

    The script runs in a process group of its own (`run_in_own_group`); a timeout raises TimeoutExpired.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.update(extra_env or {})
    command = [*(launcher or [sys.executable]), str(REPO / "scripts" / script), *args]
    status, stdout, stderr = run_in_own_group(command, env, timeout)
    if status is None:
        raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(command, status, stdout, stderr)


def run_script_in_process(script: str, *args: str):
    """Run one of scripts/ in this process, its `main(argv)` from the repository root, for the runs that load no
    model (refusals, `--check`, reward audits); returns a CompletedProcess with the exit status, stdout and
    stderr that `run_script` would give, without the 7-9 s a new interpreter spends importing torch and TRL.

    The folders the run puts on `sys.path` (a user's reward module's), the modules it imports from them and the
    rewards it registers are forgotten afterwards, as a new process would forget them: the next run imports its
    own module of the same name afresh."""
    import contextlib
    import importlib.util
    import io
    from unittest import mock

    from rewards import registry

    path, modules = list(sys.path), set(sys.modules)
    spec = importlib.util.spec_from_file_location(f"scripts_{Path(script).stem}", REPO / "scripts" / script)
    module = importlib.util.module_from_spec(spec)
    stdout, stderr = io.StringIO(), io.StringIO()
    cwd = Path.cwd()
    os.chdir(REPO)
    try:
        with (
            mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}),
            mock.patch.dict(registry._REGISTRY),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            # Imported inside the patches, so that the rewards its imports register are forgotten too.
            spec.loader.exec_module(module)
            try:
                status = module.main(list(args))
            except SystemExit as exit:  # argparse's refusals
                status = exit.code if isinstance(exit.code, int) else 1
    finally:
        os.chdir(cwd)
        added = tuple(os.path.join(folder, "") for folder in sys.path if folder and folder not in path)
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if added and (getattr(sys.modules[name], "__file__", None) or "").startswith(added):
                del sys.modules[name]
    return subprocess.CompletedProcess([script, *args], status or 0, stdout.getvalue(), stderr.getvalue())


def run_probe(probe: Path, *args: str, timeout: float = 600, env: dict | None = None) -> dict:
    """Run a probe script (tests' own, beside the test) with this Python in a process group of its own
    (`run_in_own_group`), assert it succeeded, and return the JSON of its last line of output."""
    command = [sys.executable, str(probe), *args]
    status, stdout, stderr = run_in_own_group(command, env or dict(os.environ), timeout)
    if status is None:
        raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)
    assert status == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def accelerate_launcher(config: str = "cpu_2proc.yaml") -> list[str]:
    """`accelerate launch` of two real gloo processes on this CPU with a shipped config (no GPU visible), as
    `make smoke` runs it: the config's process count and mixed precision overridden, a free port."""
    from grpo_recipes.ports import free_port

    accelerate = REPO / ".venv" / "bin" / "accelerate"
    return [
        str(accelerate) if accelerate.exists() else "accelerate",
        "launch",
        "--config_file",
        str(REPO / "configs" / config),
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        "--main_process_port",
        str(free_port()),
    ]


def two_process_launcher() -> list[str]:
    """`accelerate launch` of two real gloo processes on this CPU (configs/cpu_2proc.yaml: MULTI_GPU, no GPU)."""
    return accelerate_launcher("cpu_2proc.yaml")


def model_stub(path: Path) -> Path:
    """A model folder with a config and nothing else: a recipe naming it passes the model check, and
    loading it fails, so a test that must not load a model would see it."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    return path


def write_recipe(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def tiny_recipe(model: Path, output_dir: Path, **trainer) -> dict:
    """A recipe that trains the tiny model for 2 steps on generated arithmetic."""
    return {
        "model": {"name_or_path": str(model), "dtype": "float32"},
        "dataset": {
            "generator": {
                "name": "arithmetic",
                "train_size": 64,
                "eval_size": 8,
                "seed": 1,
                "params": {"max_ops": 1},
            }
        },
        "prompt": {"user": "Calculate {question}.", "solution_column": "answer"},
        "rewards": [{"name": "numeric_accuracy"}],
        "evaluation": {"max_samples": 8, "max_new_tokens": 8},
        "trainer": {
            "output_dir": str(output_dir),
            "per_device_train_batch_size": 4,
            "num_generations": 4,
            "max_completion_length": 8,
            "max_steps": 2,
            "logging_steps": 1,
            "save_steps": 2,
            "learning_rate": 1.0e-4,
            "seed": 0,
            **trainer,
        },
    }


def stand_in_teacher(path: Path, overrides: list[str] | None = None) -> list[str]:
    """Overrides that let a distillation recipe load where its teacher, a run of this repository, is not built:
    the student stands in for it (the same tokenizer), found as the student is (its build command dropped: on a
    fresh clone the student's own folder may be missing too). None for other recipes, or where the teacher is here."""
    from grpo_recipes.recipe import read_recipe_data

    data = read_recipe_data(Path(path), list(overrides or []))
    teacher = data.get("teacher")
    if not isinstance(teacher, dict):
        return []
    local = Path(path).parent / teacher["name_or_path"], REPO / teacher["name_or_path"]
    if "/" in teacher["name_or_path"] and not teacher["name_or_path"].startswith(("outputs/", "./", "/")):
        return []  # a Hub id: checked as one
    if any((place / "config.json").is_file() or (place / "adapter_config.json").is_file() for place in local):
        return []
    return [f"teacher.name_or_path={data['model']['name_or_path']}", "teacher.build=null"]
