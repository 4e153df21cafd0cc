"""The recipe: one YAML file that pairs a dataset, a model and reward functions with GRPO settings, or, with a
`teacher:` section, a teacher model that the model learns from by on-policy distillation.

This module owns the recipe's schema, its loading, its command-line overrides and its validation. Everything
here runs before any model or dataset loads, so a typo costs a second, not a GPU allocation.

Example:
    >>> recipe = load_recipe("recipes/default.yaml", overrides=["trainer.learning_rate=2e-5"])
    >>> recipe.trainer["learning_rate"]
    2e-05

Overrides use one convention: ``dotted.key.path=value``, where the value is read as YAML (so ``true``,
``3``, ``[a, b]`` and ``null`` mean what they do in a recipe) and list items are addressed by index
(``rewards.0.weight=0.5``). Overrides are validated exactly like the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

import rewards as reward_registry
from rewards.imports import is_import_path
from rewards.typecheck import FieldError, check_mapping, check_value, dataclass_fields, join_key, suggest

from .tasks import GENERATORS

LOCAL_DATA_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def data_suffix(path: str | Path) -> str:
    """A data file's suffix in lower case, so that ``ROWS.JSONL`` is read as ``rows.jsonl`` is.

    >>> data_suffix("data/ROWS.JSONL"), data_suffix("openai/gsm8k")
    ('.jsonl', '')
    """
    return Path(path).suffix.lower()


def is_local_data_file(path: str | Path) -> bool:
    """A name that reads as a local data file by its suffix (.jsonl, .json, .parquet, .csv, any case)."""
    return data_suffix(path) in LOCAL_DATA_SUFFIXES


class RecipeError(ValueError):
    """A recipe problem, reported as one line: the file, the key path, what is wrong and what is allowed."""

    def __init__(self, source: str, key: str, problem: str, allowed: list[str] | None = None):
        self.source, self.key, self.problem = source, key, problem
        message = f"{source}: {key}: {problem}" if key else f"{source}: {problem}"
        super().__init__(message)


@contextlib.contextmanager
def _at(source: str, prefix: str = "") -> Iterator[None]:
    """Report a FieldError raised inside as a RecipeError of `source`, its key under `prefix`."""
    try:
        yield
    except FieldError as err:
        raise RecipeError(source, join_key(prefix, err.key) or "recipe", err.problem) from None


# --------------------------------------------------------------------------------------------------------
# Schema. Each section is a dataclass; its fields are the allowed keys, their types are checked on load
# (by rewards.typecheck, which also checks reward params, generator params and the trainer section).
# --------------------------------------------------------------------------------------------------------


TrainerKind = Literal["grpo", "distillation"]
#: The TRL config class each trainer kind reads the recipe's `trainer` section into.
TRAINER_CONFIGS: dict[str, str] = {"grpo": "GRPOConfig", "distillation": "DistillationConfig"}


@dataclass
class LoraSpec:
    """PEFT LoRA adapter settings; present only when the recipe trains an adapter instead of all weights."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] | str = "all-linear"
    vllm_sync: Literal["adapter", "merged"] = "adapter"
    """How the policy reaches vLLM before each generation: the adapter alone (vLLM keeps the base weights it
    loaded; colocate mode, where vLLM can serve the adapter), or merged into every weight (TRL's sync)."""

    def __post_init__(self) -> None:
        # PEFT accepts these and fails only once the model has loaded (or, for dropout, trains on noise).
        if self.r < 1:
            raise ValueError(
                f"r: the adapter's rank must be at least 1, got {self.r} (no adapter: lora: null)"
            )
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout: a probability in [0, 1), got {self.dropout}")
        if not self.target_modules:
            raise ValueError("target_modules: name at least one module, or all-linear")


@dataclass
class ModelSpec:
    name_or_path: str
    """What is loaded: a Hub id or a local folder."""
    upstream: str | None = None
    """The Hub id a local folder was made from (documentation; nothing is downloaded from it)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    attn_implementation: Literal["eager", "sdpa", "flash_attention_2", "flash_attention_3"] | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    lora: LoraSpec | None = None
    chat_template: str | None = None
    """A chat template TRL ships, by name (e.g. qwen2_5), or a .jinja file; unset: the tokenizer's own.
    Tool recipes need one whose tool calls TRL parses (grpo_recipes.agents.templates)."""


@dataclass
class GeneratorSpec:
    name: str
    train_size: int = 2000
    eval_size: int = 200
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    """The task's params: those of the held-out rows, and of the training rows unless `train_params` says otherwise."""
    train_params: dict[str, Any] = field(default_factory=dict)
    """Params of the training rows only, over `params` (a wider operand range: a pool that a run cannot
    exhaust); the held-out rows keep `params`, so they go on measuring the task itself."""
    warmup_size: int = 0
    """Rows generated apart for the supervised warm-up's demonstrations, with no question in common with the
    training or held-out rows; 0: the warm-up shows training rows."""
    warmup_params: dict[str, Any] = field(default_factory=dict)
    """Params of the warm-up's rows, over `params` (problems of the task by default): what it must show, such
    as differences below zero (`{operators: "-"}`)."""

    def training_params(self) -> dict[str, Any]:
        """The params the training rows are generated with.

        >>> GeneratorSpec("arithmetic", params={"max_operand": 12}, train_params={"max_operand": 20}).training_params()
        {'max_operand': 20}
        """
        return {**self.params, **self.train_params}


@dataclass
class DatasetSpec:
    path: str | None = None
    """A Hub dataset id, or a local .jsonl/.json/.parquet/.csv file. A relative file path is looked up next
    to the recipe file first, then in the working directory (see `resolve_data_path`)."""
    config: str | None = None
    train_split: str = "train"
    eval_split: str | None = None
    """The held-out split: of `eval_path` when given (a Hub id), else of `path`."""
    eval_path: str | None = None
    """A separate held-out dataset: a Hub id (with `eval_split`) or a local file (looked up like `path`).
    Without it (and without `eval_split`) evaluation holds out rows of the training data."""
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    shuffle_seed: int | None = 42
    generator: GeneratorSpec | None = None
    """A built-in procedural task instead of a file (see grpo_recipes.tasks)."""


@dataclass
class PromptSpec:
    user: str
    """The user turn, with {column} placeholders filled from each dataset row."""
    solution_column: str
    """The dataset column handed to the rewards as `solution` (the ground truth)."""
    system: str | None = None
    conversational: bool = True
    """True: a chat (list of messages, the tokenizer's chat template applies). False: plain text."""


@dataclass
class RewardSpec:
    name: str
    weight: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolSpec:
    """A tool the model may call: a shipped one by name, or a user's own by import path `package.module:function`."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    """The shipped tool's settings (an import-path tool takes none)."""
    timeout_seconds: float = 10.0
    """A call that takes longer is abandoned; the model reads an error instead of the result."""
    max_result_chars: int = 2000
    """A longer result is cut to this many characters (tool tokens count against max_completion_length)."""


@dataclass
class EnvironmentSpec:
    """A stateful environment for each rollout (grpo_recipes.agents.environments): by name or `package.module:Class`."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the environment's constructor."""
    timeout_seconds: float = 10.0
    max_result_chars: int = 2000


@dataclass
class ToolCallSpec:
    """One tool call of a warm-up demonstration; argument values are templates filled from the row."""

    tool: str
    arguments: dict[str, str] = field(default_factory=dict)


@dataclass
class WarmupSpec:
    """A supervised warm-up before GRPO, in the same run: one demonstration per training row (the recipe's
    tool calls made for real, if any, then the answer filled from the row), trained by a plain supervised
    loop (grpo_recipes.training.warmup). It trains the LoRA adapter where the recipe has one, else all
    weights."""

    answer: str
    """The final assistant message, filled from the row (e.g. "The answer is {answer}.")."""
    calls: list[ToolCallSpec] = field(default_factory=list)
    """Tool calls made before the answer (a tool recipe's call format); none: the answer alone."""
    where: dict[str, str] = field(default_factory=dict)
    """Only rows whose columns have these values (e.g. {phrasing: symbols}): what the warm-up leaves to GRPO."""
    examples: int = 192
    max_steps: int = 24
    per_device_train_batch_size: int = 8
    learning_rate: float = 1.0e-4


@dataclass
class TeacherSpec:
    """The model the student learns from by on-policy distillation (TRL's DistillationTrainer): the student
    samples, the teacher scores every token of the sample, and the loss is a per-token divergence between the
    two next-token distributions (`divergence`). A recipe with a teacher trains on no reward: its `rewards`
    judge answers (the held-out evaluation, the audit) and are logged, never optimised.

    The teacher reads the student's own token ids, so it must share the student's tokenizer; there is no
    chat template of its own.

    >>> TeacherSpec(name_or_path="outputs/code-cpu", build="make train RECIPE=code-cpu").dtype
    'auto'
    """

    name_or_path: str
    """A Hub id, a model folder, or a LoRA adapter folder (merged into the base model it names)."""
    revision: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    trust_remote_code: bool = False
    divergence: Literal["reverse_kl", "forward_kl", "jsd"] | float = "reverse_kl"
    """reverse_kl (mode-seeking: the student is penalised where it puts mass the teacher does not), forward_kl
    (mass-covering), jsd, or a number between 0 (forward) and 1 (reverse): TRL's DistillationConfig `beta`,
    set here because GRPO's `trainer.beta` (a KL penalty) means something else."""
    build: str | None = None
    """The command that makes a local teacher (a training run of this repository): named when it is missing."""
    samples: Literal["student", "teacher"] = "student"
    """Who writes the completions the divergence is taken along: the student (on-policy distillation) or the
    teacher (off-policy: the student matches the teacher's distributions along the teacher's own samples, the
    classic word-level distillation on teacher-written text). The teacher samples with transformers: vLLM holds
    the student's weights."""
    estimator: Literal["full_vocabulary", "sampled_token", "one_hot"] = "full_vocabulary"
    """full_vocabulary: TRL's loss, the divergence summed over the whole vocabulary at each position of the
    sample. sampled_token: only the sampled token's log-ratio, log teacher - log student, as a per-token
    advantage in a policy-gradient loss (an unbiased estimate of the reverse KL's gradient from one token a
    position, noisier); with reverse_kl on the student's samples only. one_hot: the teacher's sampled tokens
    as targets, the cross-entropy a supervised step on written answers trains (supervised fine-tuning on the
    teacher's text, sequence-level distillation); with samples: teacher only, and `divergence` unused."""

    @property
    def beta(self) -> float:
        """DistillationConfig's `beta` for `divergence`.

        >>> TeacherSpec("t").beta, TeacherSpec("t", divergence="forward_kl").beta, TeacherSpec("t", divergence=0.25).beta
        (1.0, 0.0, 0.25)
        """
        named = {"reverse_kl": 1.0, "forward_kl": 0.0, "jsd": 0.5}
        return named[self.divergence] if isinstance(self.divergence, str) else float(self.divergence)


@dataclass
class SamplingSpec:
    """Which groups an optimizer step trains on (grpo_recipes.training.dynamic_sampling)."""

    dynamic: bool = False
    """DAPO's dynamic sampling: groups whose rewards are all equal are replaced by fresh prompts' groups."""
    max_rounds: int = 4
    """Extra generation rounds a step may spend on replacements; then it goes on with what it has."""


@dataclass
class CurriculumSpec:
    """A difficulty curriculum for a generated task (grpo_recipes.training.curriculum): the generator's params
    move between levels as training goes, from the pass rates of the groups generated.

    >>> spec = CurriculumSpec(levels=[{"max_operand": 9}, {"max_operand": 20}], start=0)
    >>> spec.level_params({"max_ops": 1, "max_operand": 12}, 1)
    {'max_ops': 1, 'max_operand': 20}
    """

    levels: list[dict[str, Any]]
    """Generator params of each level, easy to hard, each merged over `dataset.generator.params`; at least 2."""
    start: int | None = None
    """The level training starts at; default: the level whose params are `dataset.generator.params` (the
    held-out task's), else 0."""
    window: int = 8
    """How many groups are judged before the level may move."""
    raise_at: float = 0.5
    """Share of all-right groups in the window at or above which the level goes up."""
    lower_at: float = 0.5
    """Share of all-wrong groups in the window at or above which the level goes down (when it did not go up)."""
    reward: str | None = None
    """The reward (a name from `rewards`) that says a completion is right; default: the evaluation reward
    when it is one of `rewards`, else the first reward."""
    solved_at: float = 1.0
    """The value of `reward` at or above which a completion counts as right."""

    def level_params(self, base: dict[str, Any], level: int) -> dict[str, Any]:
        """The generator params of `level`: its own over the `base` params."""
        return {**base, **self.levels[level]}


@dataclass
class EvaluationSpec:
    """Greedy accuracy on held-out rows before and after training."""

    enabled: bool = True
    max_samples: int = 200
    reward: str | None = None
    """The reward that decides correctness (a name from `rewards`); default: the recipe's first reward."""
    max_new_tokens: int | None = None
    """Default: trainer.max_completion_length."""
    batch_size: int = 50
    every_steps: int | None = None
    """Also evaluate every N training steps, giving held-out accuracy against minutes of training (the run's
    summary.json's `held_out_curve`, report.md's table and `held_out_curve.png`). The minutes count training
    alone: the evaluations during training are not counted, nor by a sweep's budget. None: before and after
    only."""


@dataclass
class AuditSpec:
    """How `scripts/audit_rewards.py` writes an ideal completion from a row's gold solution."""

    completion_template: str | None = None
    """Filled with {reasoning} (the gold solution's text) and {answer} (its final answer). Default: derived
    from the answer format the prompt asks for, else the accuracy reward's `answer_format` param (see
    `grpo_recipes.evaluation.audit.completion_template`); the audit refuses to guess beyond that."""
    gold_answer: Literal["raw", "gsm8k", "boxed"] = "raw"
    """How the final answer is read from the gold: the whole value, after `####`, or the last \\boxed{}."""


@dataclass
class Recipe:
    model: ModelSpec
    dataset: DatasetSpec
    prompt: PromptSpec
    rewards: list[RewardSpec]
    trainer: dict[str, Any] = field(default_factory=dict)
    """Passed to TRL's GRPOConfig (DistillationConfig with a `teacher`): any of its fields; unknown ones are an error."""
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    curriculum: CurriculumSpec | None = None
    """A difficulty curriculum over the levels of `dataset.generator`'s params (none: the params stay)."""
    evaluation: EvaluationSpec = field(default_factory=EvaluationSpec)
    audit: AuditSpec = field(default_factory=AuditSpec)
    tools: list[ToolSpec] = field(default_factory=list)
    """Tools the model may call during a rollout (multi-turn; trainer.max_tool_calling_iterations bounds the turns)."""
    environment: EnvironmentSpec | None = None
    warmup: WarmupSpec | None = None
    teacher: TeacherSpec | None = None
    """On-policy distillation from this model instead of GRPO on the rewards (see `TeacherSpec`)."""
    description: str = ""
    name: str = field(default="", init=False)
    """Set from the file name; not a key in the file."""
    source: str = field(default="", init=False)
    """Where the recipe came from, with the overrides applied (for messages); not a key in the file."""
    path: Path | None = field(default=None, init=False)
    """The recipe file, when it was read from one; not a key in the file."""
    base_dir: Path | None = field(default=None, init=False)
    """The recipe file's folder: where relative data paths and a user's own modules are looked for first."""

    @property
    def search_dirs(self) -> list[Path]:
        """Where a user's own reward, tool or environment module is looked for before the working directory."""
        return [self.base_dir] if self.base_dir is not None else []

    def to_dict(self) -> dict[str, Any]:
        """The recipe as plain data, in the shape of the file (for writing the resolved recipe)."""
        data = dataclasses.asdict(self)
        for not_in_file in ("name", "source", "path", "base_dir"):
            data.pop(not_in_file)
        return data

    @property
    def trainer_kind(self) -> TrainerKind:
        """Which TRL trainer the recipe selects: "distillation" with a `teacher`, else "grpo"."""
        return "distillation" if self.teacher is not None else "grpo"

    @property
    def uses_tools(self) -> bool:
        """Whether rollouts are multi-turn: the recipe has tools or an environment."""
        return bool(self.tools) or self.environment is not None

    @property
    def evaluation_reward(self) -> RewardSpec:
        """The reward that decides whether an evaluation answer is correct."""
        if self.evaluation.reward is None:
            return self.rewards[0]
        for spec in self.rewards:
            if spec.name == self.evaluation.reward:
                return spec
        return RewardSpec(name=self.evaluation.reward)

    # Built once (parse_recipe builds them to check their params) and shared by training, evaluation and
    # the audit. Cached on the instance, not dataclass fields, so to_dict() and the resolved recipe stay
    # plain data; rewards pickle, so a copied or pickled recipe carries them along.
    @functools.cached_property
    def reward_functions(self) -> list[reward_registry.Reward]:
        """One reward per entry of `rewards`, built with its params."""
        return [
            _build_reward(self.source, f"rewards[{i}]", spec, self.search_dirs)
            for i, spec in enumerate(self.rewards)
        ]

    @functools.cached_property
    def evaluation_function(self) -> reward_registry.Reward:
        """The reward of `evaluation_reward`: the same instance as in `reward_functions` when it is one of them."""
        spec = self.evaluation_reward
        for candidate, function in zip(self.rewards, self.reward_functions, strict=True):
            if candidate is spec:
                return function
        return _build_reward(self.source, "evaluation.reward", spec, self.search_dirs)


# --------------------------------------------------------------------------------------------------------
# Loading, overrides and semantic checks.
# --------------------------------------------------------------------------------------------------------


def apply_overrides(data: dict[str, Any], overrides: list[str], source: str) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides to the raw recipe data (in place) and return it.

    >>> apply_overrides({"trainer": {"learning_rate": 1e-6}}, ["trainer.learning_rate=2e-5"], "r.yaml")
    {'trainer': {'learning_rate': '2e-5'}}
    """
    for override in overrides:
        if "=" not in override:
            raise RecipeError(source, "", f"override {override!r} is not of the form key.path=value.")
        dotted, raw = override.split("=", 1)
        parts = [p for p in dotted.strip().lstrip("-").split(".")]
        if not all(parts):
            raise RecipeError(source, dotted, f"override {override!r} has an empty key.")
        try:
            value = load_yaml_strict(raw) if raw.strip() else None
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or type(err).__name__
            raise RecipeError(
                source,
                dotted.strip(),
                f"override {override!r}: its value is read as YAML and is not valid YAML ({problem}); "
                f"quote it, as in {dotted.strip()}='\"...\"'.",
            ) from None
        node: Any = data
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            here = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise RecipeError(
                        source, here, f"override {override!r}: no list item {part} (has {len(node)})."
                    )
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    if node.get(part) is None:
                        node[part] = {}
                    node = node[part]
            else:
                raise RecipeError(source, here, f"override {override!r}: {here} is not a mapping.")
    return data


def template_placeholders(template: str) -> list[str]:
    """The column names a prompt template refers to.

    >>> template_placeholders("Solve: {question} ({hint})")
    ['question', 'hint']
    """
    names = []
    for _, name, _, _ in string.Formatter().parse(template):
        if name is not None and name not in names:
            names.append(name)
    return names


def _check_prompt(recipe: Recipe, source: str) -> None:
    for where, template in (("prompt.user", recipe.prompt.user), ("prompt.system", recipe.prompt.system)):
        if template is None:
            continue
        try:
            names = template_placeholders(template)
        except ValueError as err:
            raise RecipeError(
                source, where, f"invalid template ({err}); write a literal brace as {{{{ or }}}}."
            ) from None
        for name in names:
            if not name.isidentifier():
                raise RecipeError(
                    source,
                    where,
                    f"placeholder {{{name}}} must be a plain column name; write literal braces doubled, "
                    f"as in \\boxed{{{{}}}}.",
                )
        for _, name, format_spec, conversion in string.Formatter().parse(template):
            # Columns are read as the file gives them (a string, a number): "{question:d}" would fail on
            # the first string, after the data loads.
            if name is not None and (format_spec or conversion):
                written = (
                    name
                    + (f"!{conversion}" if conversion else "")
                    + (f":{format_spec}" if format_spec else "")
                )
                raise RecipeError(
                    source,
                    where,
                    f"placeholder {{{written}}}: format specs and conversions are not supported in a prompt; "
                    f"write {{{name}}}.",
                )


def _check_rewards(recipe: Recipe, source: str) -> None:
    if not recipe.rewards:
        raise RecipeError(source, "rewards", "at least one reward is required.")
    available = reward_registry.available_rewards()
    named = [(f"rewards[{i}].name", spec.name) for i, spec in enumerate(recipe.rewards)]
    if recipe.evaluation.reward is not None:
        named.append(("evaluation.reward", recipe.evaluation.reward))
    for key, name in named:
        if name not in available and not is_import_path(name):
            raise RecipeError(
                source,
                key,
                f"unknown reward '{name}'. Allowed: {', '.join(available)}, or your own as "
                f"'package.module:function' (or ':Class').{suggest(name, available)}",
            )
    _fill_completion_length(recipe, source, available)
    # Build every reward now, which checks its params; training, evaluation and the audit reuse these.
    _ = recipe.evaluation_function


def _fill_completion_length(recipe: Recipe, source: str, available: list[str]) -> None:
    """One source of truth for the completion length: a catalogue reward that takes `max_completion_length`
    (`soft_overlong`) gets `trainer.max_completion_length` when it leaves it out, and may not differ from it
    (a trainer override would otherwise leave the penalty's ramp where it was, penalising valid answers)."""
    limit = recipe.trainer.get("max_completion_length")
    for i, spec in enumerate(recipe.rewards):
        if spec.name not in available or "max_completion_length" not in reward_registry.reward_params(
            spec.name
        ):
            continue
        given = spec.params.get("max_completion_length")
        if given is None and limit is not None:
            spec.params = {**spec.params, "max_completion_length": limit}
        elif given is not None and limit is not None and given != limit:
            raise RecipeError(
                source,
                f"rewards[{i}].params.max_completion_length",
                f"{given} differs from trainer.max_completion_length ({limit}): the reward's length limit is "
                "where generation stops; leave it out and the trainer's is used.",
            )


def _check_curriculum(recipe: Recipe, source: str) -> None:
    """Each level's params checked by the generator (and enough distinct rows for `train_size`), the start
    level and thresholds in range, the judging reward one of `rewards`; unset defaults are filled in."""
    spec = recipe.curriculum
    if spec is None:
        return
    generator_spec = recipe.dataset.generator
    if generator_spec is None:
        raise RecipeError(
            source,
            "curriculum",
            "a curriculum moves the params of a generated task: it needs dataset.generator, not dataset.path.",
        )
    if len(spec.levels) < 2:
        raise RecipeError(
            source, "curriculum.levels", f"give at least 2 levels, easy to hard; got {len(spec.levels)}."
        )
    generator = GENERATORS[generator_spec.name]
    base = generator_spec.params
    for i, level in enumerate(spec.levels):
        key = f"curriculum.levels.{i}"
        with _at(source, key):
            checked = generator.check_params({**base, **level})
        spec.levels[i] = {name: checked[name] for name in level}
        capacity = generator.capacity(**checked)
        if capacity < generator_spec.train_size:
            raise RecipeError(
                source,
                key,
                f"these params allow {capacity} distinct problems, fewer than dataset.generator.train_size "
                f"({generator_spec.train_size}) rows of each level.",
            )
    if spec.start is None:
        full = generator.with_defaults(base)
        same = [
            i for i in range(len(spec.levels)) if generator.with_defaults(spec.level_params(base, i)) == full
        ]
        spec.start = same[0] if same else 0
    if not 0 <= spec.start < len(spec.levels):
        raise RecipeError(
            source,
            "curriculum.start",
            f"must be a level index, 0 to {len(spec.levels) - 1}; got {spec.start}.",
        )
    if spec.window < 1:
        raise RecipeError(source, "curriculum.window", f"must be at least 1 group, got {spec.window}.")
    for key in ("raise_at", "lower_at"):
        if not 0.0 <= getattr(spec, key) <= 1.0:
            raise RecipeError(
                source, f"curriculum.{key}", f"must be a share, 0 to 1; got {getattr(spec, key)}."
            )
    names = [reward.name for reward in recipe.rewards]
    if spec.reward is None:
        evaluation = recipe.evaluation_reward.name
        spec.reward = evaluation if evaluation in names else names[0]
    elif spec.reward not in names:
        raise RecipeError(
            source,
            "curriculum.reward",
            f"'{spec.reward}' is not one of the recipe's rewards ({', '.join(names)}).{suggest(spec.reward, names)}",
        )


def _check_game_agrees(recipe: Recipe, source: str, env_class: type, params: dict[str, Any]) -> None:
    """The guess_number environment allows the guesses its generator's questions promise.

    The question text states the number of guesses; an environment given another number would stop a game
    early, or score one the question said was lost. (The range in the text decides nothing in the game: the
    secret comes from the row.)
    """
    gen = recipe.dataset.generator
    if recipe.environment is None or recipe.environment.name != "guess_number" or gen is None:
        return
    if gen.name != "guess_number":
        return
    allowed = inspect.signature(env_class).parameters["max_guesses"].default
    allowed = params.get("max_guesses", allowed)
    generator = GENERATORS[gen.name]
    asked = [("dataset.generator.params", gen.params)]
    if gen.train_params:
        asked.append(("dataset.generator.train_params", gen.training_params()))
    if gen.warmup_params:
        asked.append(("dataset.generator.warmup_params", {**gen.params, **gen.warmup_params}))
    if recipe.curriculum is not None:
        asked += [
            (f"curriculum.levels.{i}", recipe.curriculum.level_params(gen.params, i))
            for i in range(len(recipe.curriculum.levels))
        ]
    for where, given in asked:
        promised = generator.with_defaults(given)["max_guesses"]
        if promised != allowed:
            raise RecipeError(
                source,
                f"{where}.max_guesses",
                f"the questions promise {promised} guesses, but the environment allows {allowed} "
                "(environment.params.max_guesses); give both the same value.",
            )


def _check_tools(recipe: Recipe, source: str, base_dir: Path | None = None) -> None:
    """Tools, environment, chat template and warm-up: names resolve, params fit, the template parses calls."""
    from .agents.environments import get_environment_class, tool_methods
    from .agents.tools import ToolError, build_tool

    names: dict[str, int] = {}
    search = recipe.search_dirs
    for i, spec in enumerate(recipe.tools):
        _check_limits(source, f"tools[{i}]", spec)
        try:
            name = build_tool(spec.name, spec.params, search=search).__name__
        except ToolError as err:
            raise RecipeError(source, join_key(f"tools[{i}]", err.key), err.problem) from None
        if name in names:
            raise RecipeError(
                source,
                f"tools[{i}].name",
                f"tools[{names[name]}] is also called '{name}': the model could not tell them apart.",
            )
        names[name] = i
    if recipe.environment is not None:
        _check_limits(source, "environment", recipe.environment)
        try:
            env_class, params = get_environment_class(
                recipe.environment.name, recipe.environment.params, search=search
            )
        except ToolError as err:
            raise RecipeError(source, join_key("environment", err.key), err.problem) from None
        # One instance now, as TRL makes one when the trainer starts: its constructor's own checks of the
        # params fail here, before any model loads.
        try:
            env_class(**params)
        except Exception as err:  # noqa: BLE001 - whatever the user's constructor raises is a params problem
            raise RecipeError(
                source,
                "environment.params",
                f"{recipe.environment.name} could not be created: {type(err).__name__}: {err}",
            ) from None
        clash = sorted(set(names) & set(tool_methods(env_class)))
        if clash:
            raise RecipeError(
                source, "tools", f"{', '.join(clash)} is both a tool and a method of the environment."
            )
        _check_game_agrees(recipe, source, env_class, params)
    if recipe.warmup is not None:  # the types are the parser's to check; the ranges are these
        for key in ("examples", "max_steps", "per_device_train_batch_size"):
            value = getattr(recipe.warmup, key)
            if value < 1:
                raise RecipeError(source, f"warmup.{key}", f"must be a whole number >= 1, not {value!r}.")
        rate = recipe.warmup.learning_rate
        if not 0 < rate < 1:
            raise RecipeError(source, "warmup.learning_rate", f"must be a number in (0, 1), not {rate!r}.")
    if recipe.warmup is not None and recipe.warmup.calls:
        names = [spec.name.rpartition(":")[2] for spec in recipe.tools]
        if not names:
            raise RecipeError(
                source, "warmup.calls", "the warm-up demonstrates tool calls, but the recipe has no tools."
            )
        for i, call in enumerate(recipe.warmup.calls):
            if call.tool not in names:
                raise RecipeError(
                    source,
                    f"warmup.calls[{i}].tool",
                    f"'{call.tool}' is not one of the recipe's tools ({', '.join(names)}).",
                )
    if recipe.model.chat_template is not None or recipe.uses_tools:
        _check_chat_template(recipe, source, base_dir)


def _check_limits(source: str, key: str, spec: ToolSpec | EnvironmentSpec) -> None:
    if not 0 < spec.timeout_seconds <= 3600:
        raise RecipeError(
            source, f"{key}.timeout_seconds", f"must be in (0, 3600] seconds, got {spec.timeout_seconds}."
        )
    if spec.max_result_chars < 1:
        raise RecipeError(
            source, f"{key}.max_result_chars", f"must be at least 1, got {spec.max_result_chars}."
        )


def _check_chat_template(recipe: Recipe, source: str, base_dir: Path | None) -> None:
    """A named template must exist and, for a tool recipe, be one TRL parses tool calls with; the model's own
    template is checked once the tokenizer loads (`agents.templates.template_problem`)."""
    from .agents.templates import ADDS_DEFAULT_SYSTEM, template_problem, template_text

    name = recipe.model.chat_template
    if name is None:
        return
    if name.endswith(".jinja"):
        found = resolve_data_path(name, base_dir)
        name = recipe.model.chat_template = found or name
    if recipe.uses_tools:
        problem = template_problem(name)
    else:
        try:
            template_text(name)
            problem = None
        except ValueError as err:
            problem = str(err)
    if problem:
        raise RecipeError(source, "model.chat_template", problem)
    if name in ADDS_DEFAULT_SYSTEM and recipe.prompt.system is None:
        raise RecipeError(
            source,
            "prompt.system",
            f'the {name} template writes its own system message ("You are Qwen, created by Alibaba Cloud") '
            "when there is none; set prompt.system.",
        )


def _build_reward(
    source: str, key: str, spec: RewardSpec, search: list[Path] | None = None
) -> reward_registry.Reward:
    """The reward `spec` names, built with its params (a user's own by import path looked for next to the
    recipe first); a bad param is a RecipeError under `key.params`, an unknown reward under `key`."""
    try:
        return reward_registry.build_reward(spec.name, spec.params, search=search or [])
    except reward_registry.InvalidRewardParamsError as err:
        place = join_key(f"{key}.params", err.param) if err.param or not is_import_path(spec.name) else key
        raise RecipeError(source, place, err.problem) from None
    except reward_registry.UnknownRewardError as err:
        raise RecipeError(source, key if key.startswith("evaluation") else f"{key}.name", str(err)) from None


def resolve_data_path(value: str, base_dir: Path | None) -> str | None:
    """Where a local data file named in a recipe is: None when it is nowhere.

    One rule: an absolute path is itself; a relative one is taken relative to the recipe file's folder
    (`base_dir`) when the file exists there, else relative to the working directory (as before recipes
    could sit beside their data). The result is the path to open from the working directory.

    >>> resolve_data_path("README.md", Path("recipes")), resolve_data_path("default.yaml", Path("recipes"))
    ('README.md', 'recipes/default.yaml')
    >>> resolve_data_path("missing.jsonl", Path("recipes")) is None
    True
    """
    if base_dir is not None and not Path(value).is_absolute():
        beside = Path(os.path.normpath(base_dir / value))
        if beside.is_file():
            return str(beside)
    return value if Path(value).is_file() else None


HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


def _check_model(recipe: Recipe, source: str, base_dir: Path | None) -> None:
    """The model is a local folder with a config (looked for next to the recipe first, then from the
    working directory; the path is rewritten to where it was found), or something shaped like a Hub id.

    A relative path whose first folder exists here (``models/`` after ``make model``) is a local path that
    is missing, not a Hub id: ``models/Other-Model`` is refused instead of being sent to the Hub.
    """
    value = recipe.model.name_or_path
    hint = " (`make model` builds the local SmolLM2-135M-Instruct)" if "SmolLM2" in value else ""
    recipe.model.name_or_path = model_location(value, source, "model.name_or_path", base_dir, hint)


def _check_teacher(recipe: Recipe, source: str, base_dir: Path | None) -> None:
    """The teacher is found as the model is (a folder or a Hub id; a missing one names its `build` command),
    and the recipe uses nothing that TRL's DistillationTrainer does not run."""
    teacher = recipe.teacher
    if teacher is None:
        return
    hint = f" (build it first: {teacher.build})" if teacher.build else ""
    # A teacher with a build command is a folder this machine makes: never a Hub id (on a fresh clone,
    # `outputs/code-cpu` would otherwise look like one).
    teacher.name_or_path = model_location(
        teacher.name_or_path, source, "teacher.name_or_path", base_dir, hint, local=bool(teacher.build)
    )
    if not 0.0 <= teacher.beta <= 1.0:
        raise RecipeError(
            source,
            "teacher.divergence",
            f"reverse_kl, forward_kl, jsd or a number from 0 (forward KL) to 1 (reverse KL), got {teacher.divergence}.",
        )
    if teacher.samples == "teacher" and recipe.trainer.get("use_vllm"):
        raise RecipeError(
            source,
            "teacher.samples",
            "teacher: the teacher samples with transformers, and vLLM would hold the student's weights "
            "(set trainer.use_vllm: false, or teacher.samples: student).",
        )
    if teacher.estimator == "sampled_token" and (teacher.samples != "student" or teacher.beta != 1.0):
        raise RecipeError(
            source,
            "teacher.estimator",
            "sampled_token estimates the reverse KL's gradient from the student's own samples: it needs "
            f"teacher.divergence: reverse_kl and teacher.samples: student (got {teacher.divergence}, "
            f"{teacher.samples}).",
        )
    if teacher.estimator == "one_hot" and teacher.samples != "teacher":
        raise RecipeError(
            source,
            "teacher.estimator",
            "one_hot trains on the teacher's own text as one-hot targets: it needs teacher.samples: teacher "
            "(on the student's samples it would teach the student its own answers).",
        )
    unsupported = [
        ("tools", bool(recipe.tools)),
        ("environment", recipe.environment is not None),
        ("curriculum", recipe.curriculum is not None),
        ("sampling.dynamic", recipe.sampling.dynamic),
    ]
    for key, used in unsupported:
        if used:
            raise RecipeError(
                source,
                key,
                "not with a teacher: distillation samples one completion a prompt and trains on no reward "
                f"(remove {key}, or the teacher section for GRPO).",
            )


def model_location(
    value: str, source: str, key: str, base_dir: Path | None, hint: str = "", local: bool = False
) -> str:
    """Where the model `value` is: a local folder (next to the recipe first, then from the working directory)
    with a config.json or an adapter_config.json, or `value` itself when it is shaped like a Hub id (unless
    `local`: then it must be a folder)."""
    path = Path(value).expanduser()
    places = (
        [Path(os.path.normpath(base_dir / path))] if base_dir is not None and not path.is_absolute() else []
    )
    for place in [*places, path]:
        if place.is_dir():
            if not any((place / name).is_file() for name in ("config.json", "adapter_config.json")):
                raise RecipeError(
                    source,
                    key,
                    f"{place} is a folder without a config.json: not a model{hint} (give a Hub id, or a "
                    "folder that save_pretrained wrote).",
                )
            return str(place)
        if place.exists():
            raise RecipeError(source, key, f"{place} is a file, not a model folder.")
    first = value.split("/")[0]
    local = (
        local
        or value.startswith((".", "/", "~"))
        or not HUB_ID.match(value)
        or ("/" in value and Path(first).is_dir())
    )
    if local:
        looked = ", ".join(str(place) for place in [*places, path])
        raise RecipeError(
            source,
            key,
            f"no model folder at {looked}{hint}; give an existing folder or a Hub id such as 'Qwen/Qwen2.5-0.5B'.",
        )
    return value


def _check_dataset(recipe: Recipe, source: str, base_dir: Path | None) -> None:
    spec = recipe.dataset
    for key in ("max_train_samples", "max_eval_samples"):
        value = getattr(spec, key)
        if value is not None and value < 1:
            raise RecipeError(source, f"dataset.{key}", f"must be at least 1 (or unset: all), got {value}.")
    if (spec.path is None) == (spec.generator is None):
        raise RecipeError(
            source, "dataset", "give exactly one of 'path' (Hub id or local file) or 'generator'."
        )
    if spec.generator is not None:
        names = sorted(GENERATORS)
        if spec.generator.name not in names:
            raise RecipeError(
                source,
                "dataset.generator.name",
                f"unknown generator '{spec.generator.name}'. Allowed: {', '.join(names)}."
                f"{suggest(spec.generator.name, names)}",
            )
        gen = spec.generator
        generator = GENERATORS[gen.name]
        with _at(source, "dataset.generator.params"):
            gen.params = generator.check_params(gen.params)
        for key in ("train_params", "warmup_params"):
            with _at(source, f"dataset.generator.{key}"):
                generator.check_params({**gen.params, **getattr(gen, key)})
        if gen.warmup_size < 0:
            raise RecipeError(
                source, "dataset.generator.warmup_size", f"must be 0 or more, got {gen.warmup_size}."
            )
        if gen.train_size < 1:
            raise RecipeError(
                source, "dataset.generator.train_size", f"must be at least 1, got {gen.train_size}."
            )
        if gen.eval_size < 0:
            raise RecipeError(
                source, "dataset.generator.eval_size", f"must be 0 or more, got {gen.eval_size}."
            )
        # Counts that cannot fit; generation itself refuses the rest (training rows that the held-out and
        # warm-up rows leave too few of, where train_params overlap the task's params).
        capacity = generator.capacity(**gen.params)
        sizes = [("train_size", gen.train_size)] if not gen.train_params else []
        sizes += [("eval_size", gen.eval_size)]
        sizes += [("warmup_size", gen.warmup_size)] if not gen.warmup_params else []
        if sum(size for _, size in sizes) > capacity:
            raise RecipeError(
                source,
                "dataset.generator",
                " + ".join(f"{name} {size}" for name, size in sizes if size or name != "warmup_size")
                + f" exceed the {capacity} distinct problems its params allow.",
            )
        training_capacity = generator.capacity(**gen.training_params())
        if gen.train_params and gen.train_size > training_capacity:
            raise RecipeError(
                source,
                "dataset.generator.train_size",
                f"train_size {gen.train_size} exceeds the {training_capacity} distinct problems train_params allow.",
            )
    else:
        for key in ("path", "eval_path"):
            value = getattr(spec, key)
            if value is None:
                continue
            found = resolve_data_path(value, base_dir)
            if not is_local_data_file(value):
                # An existing file that is not one we read: a Hub lookup of its name would blame the network.
                if found is not None:
                    raise RecipeError(
                        source,
                        f"dataset.{key}",
                        f"local file {found} is not a data file this reads ("
                        + (f"suffix '{Path(value).suffix}'" if Path(value).suffix else "no suffix")
                        + f"); use one of {', '.join(LOCAL_DATA_SUFFIXES)} (for a Hub id, move the file: "
                        "it has the same name).",
                    )
                continue
            if found is None:
                where = f"next to the recipe ({base_dir}) nor " if base_dir is not None else ""
                raise RecipeError(
                    source,
                    f"dataset.{key}",
                    f"local file {value} does not exist (looked {where}in the working directory).",
                )
            setattr(spec, key, found)
        eval_source = spec.eval_path or spec.path
        if is_local_data_file(eval_source) and spec.eval_split is not None:
            raise RecipeError(
                source, "dataset.eval_split", "a local file has no splits; use dataset.eval_path."
            )


# Where each key of a recipe may sit: section path -> its dataclass. The trainer section's keys are
# GRPOConfig's (see trainer_fields). Nested sections come last, so a top-level `seed` suggests trainer.seed
# before dataset.generator.seed.
_SECTIONS: dict[str, type] = {
    "": Recipe,
    "model": ModelSpec,
    "dataset": DatasetSpec,
    "prompt": PromptSpec,
    "sampling": SamplingSpec,
    "curriculum": CurriculumSpec,
    "evaluation": EvaluationSpec,
    "audit": AuditSpec,
    "teacher": TeacherSpec,
}
_NESTED_SECTIONS: dict[str, type] = {"model.lora": LoraSpec, "dataset.generator": GeneratorSpec}
# `warmup` and `environment` are left out: their keys (learning_rate, max_steps, params) are named after the
# trainer's and a reward's on purpose, and a misplaced one would be suggested in both places.


def _check_key_places(data: Any, source: str, check_trainer: bool) -> None:
    """A key unknown where it is but valid in another section is reported with that section's path.

    `seed` at the top level: "unknown key 'seed' at the top level. Did you mean trainer.seed?" Keys that
    are unknown everywhere are left to the type check, which suggests the closest spelling in place.
    The trainer's keys are known only with `check_trainer` (that imports trl); a key elsewhere that is a
    field of the trainer kind's config imports it anyway, as that is the error path.
    """
    if not isinstance(data, dict):
        return
    places = {**_SECTIONS, **_NESTED_SECTIONS}
    allowed = {place: list(dataclass_fields(cls)[0]) for place, cls in places.items()}
    kind = "distillation" if data.get("teacher") is not None else "grpo"

    def section(place: str) -> Any:
        node: Any = data
        for part in filter(None, place.split(".")):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    checked = list(places) + (["trainer"] if check_trainer else [])
    for place in checked:
        mapping = section(place)
        if not isinstance(mapping, dict):
            continue
        # A trainer key of the other trainer kind's config is left to _check_trainer, which says so.
        here = (
            [*trainer_fields("grpo"), *trainer_fields("distillation")]
            if place == "trainer"
            else allowed[place]
        )
        folded_here = {name.casefold() for name in here}
        for key in mapping:
            if not isinstance(key, str) or key.casefold() in folded_here:
                continue  # known here (a case slip is the type check's did-you-mean)
            others = [
                f"{other}.{name}"
                for other in [*_SECTIONS, "trainer", *_NESTED_SECTIONS]
                if other != place
                and not (place == "teacher" and other == "trainer")  # teacher.beta: divergence
                for name in (trainer_fields(kind) if other == "trainer" else allowed[other])
                if other and name.casefold() == key.casefold()
            ]
            if others:
                at = f"unknown key '{key}'" + ("" if place else " at the top level")
                raise RecipeError(source, place, f"{at}. Did you mean {' or '.join(others)}?")


@functools.cache
def trainer_fields(kind: TrainerKind = "grpo") -> dict[str, Any]:
    """The keys allowed in a recipe's `trainer` section, with their annotations: the fields of TRL's config for
    the trainer `kind` (GRPOConfig, or DistillationConfig for a recipe with a teacher)."""
    import trl  # imported here: trl pulls in torch, which plain parsing does not need

    return dataclass_fields(getattr(trl, TRAINER_CONFIGS[kind]))[0]


def _check_trainer(recipe: Recipe, source: str) -> None:
    """Each key one the trainer kind's config has (a key of the other kind's is named as such), each value
    against its annotation, so a mistake names its key here rather than surfacing from inside TRL's config as
    a bare TypeError. The list of ~190 fields is too long to print."""
    kind = recipe.trainer_kind
    other: TrainerKind = "grpo" if kind == "distillation" else "distillation"
    fields = trainer_fields(kind)
    for key in recipe.trainer:
        if not isinstance(key, str):
            continue
        if kind == "distillation" and key == "beta":
            raise RecipeError(
                source,
                "trainer.beta",
                "with a teacher, DistillationConfig's beta picks the divergence, where GRPO's beta weighs a KL "
                "penalty: set teacher.divergence (reverse_kl, forward_kl, jsd) instead.",
            )
        if key.startswith("teacher_model"):
            raise RecipeError(
                source,
                f"trainer.{key}",
                "the teacher is set in the recipe's `teacher:` section (name_or_path, revision, dtype), not here.",
            )
        if key not in fields and key in trainer_fields(other):
            why = (
                "a recipe with a teacher trains with TRL's DistillationTrainer (one completion a prompt, the "
                "teacher's per-token divergence as the loss, no reward)"
                if kind == "distillation"
                else "only a recipe with a `teacher:` section trains with it"
            )
            raise RecipeError(
                source,
                f"trainer.{key}",
                f"a {TRAINER_CONFIGS[other]} setting, not one of {TRAINER_CONFIGS[kind]}: {why}.",
            )
    with _at(source):
        recipe.trainer = check_mapping(recipe.trainer, fields, "trainer", list_allowed=False)
    # TRL's config accepts these; a run would fail (or divide by zero) only after the model loads.
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "max_completion_length"):
        value = recipe.trainer.get(key)
        if value is not None and value < 1:
            raise RecipeError(source, f"trainer.{key}", f"must be at least 1, got {value}.")
    temperature = recipe.trainer.get("temperature")
    if temperature is not None and temperature <= 0:
        raise RecipeError(
            source,
            "trainer.temperature",
            f"must be above 0, got {temperature}: GRPO samples its groups (greedy samples would all be alike).",
        )


def check_columns(recipe: Recipe, columns: list[str], held_out: bool = False) -> None:
    """Check that the prompt's placeholders and the ground-truth column exist in the dataset's `columns`.

    `held_out`: `columns` are those of the held-out data (`dataset.eval_path` or `eval_split`), and the
    error names that data rather than the prompt.
    """
    spec = recipe.prompt
    needed = [
        (where, name)
        for where, template in (("prompt.user", spec.user), ("prompt.system", spec.system))
        for name in template_placeholders(template or "")
    ] + [("prompt.solution_column", spec.solution_column)]
    for where, name in needed:
        if name in columns:
            continue
        listing = f"Columns: {', '.join(columns)}.{suggest(name, columns)}"
        if held_out:
            key = "dataset.eval_path" if recipe.dataset.eval_path else "dataset.eval_split"
            problem = f"the held-out data has no column '{name}' ({where} needs it). {listing}"
        elif where == "prompt.solution_column":
            key, problem = where, f"column '{name}' is not in the dataset. {listing}"
        else:
            key, problem = where, f"placeholder {{{name}}} has no matching dataset column. {listing}"
        raise RecipeError(recipe.source, key, problem)


def parse_recipe(
    data: Any, source: str, name: str = "recipe", check_trainer: bool = True, base_dir: Path | None = None
) -> Recipe:
    """Validate raw recipe data (a mapping, as read from YAML) and return the `Recipe`.

    Its rewards are built here (see `Recipe.reward_functions`), and its trainer values checked against
    GRPOConfig's annotations unless `check_trainer` is false (that imports trl, hence torch). `base_dir`:
    the recipe file's folder, where relative data paths are looked up first (`resolve_data_path`); the
    paths are rewritten to where the files were found.
    """
    _check_key_places(data, source, check_trainer)
    with _at(source):
        recipe = check_value(data, Recipe)
    recipe.name, recipe.source, recipe.base_dir = name, source, base_dir
    _check_model(recipe, source, base_dir)
    _check_teacher(recipe, source, base_dir)
    _check_dataset(recipe, source, base_dir)
    _check_prompt(recipe, source)
    if not 0 <= recipe.sampling.max_rounds <= 64:
        raise RecipeError(
            source, "sampling.max_rounds", f"must be between 0 and 64, got {recipe.sampling.max_rounds}."
        )
    _check_rewards(recipe, source)
    _check_curriculum(recipe, source)
    _check_evaluation(recipe, source)
    _check_tools(recipe, source, base_dir)
    if check_trainer:
        _check_trainer(recipe, source)
    return recipe


def _check_evaluation(recipe: Recipe, source: str) -> None:
    for key in ("max_samples", "batch_size", "every_steps"):
        value = getattr(recipe.evaluation, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise RecipeError(
                source, f"evaluation.{key}", f"must be a whole number of at least 1, got {value!r}."
            )


def load_recipe(path: str | Path, overrides: list[str] | None = None, check_trainer: bool = True) -> Recipe:
    """Read, override and validate a recipe file. Raises `RecipeError` with a one-line message."""
    path = Path(path)
    overrides = list(overrides or [])
    source = str(path) + (f" (with overrides {' '.join(overrides)})" if overrides else "")
    data = read_recipe_data(path, overrides)
    recipe = parse_recipe(data, source, name=path.stem, check_trainer=check_trainer, base_dir=path.parent)
    recipe.path = path
    return recipe


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: PyYAML keeps the last
    silently, so a `trainer:` section appended to tweak one setting would drop the whole first section."""

    def flatten_mapping(self, node):
        # Checked here, before PyYAML merges `<<: *anchor` keys into the mapping (in place, so a mapping that is
        # merged elsewhere is checked as written, once). Keys are compared as written: scalars of one tag.
        if id(node) not in self._checked:
            self._checked.add(id(node))
            seen: dict[tuple[str, str], Any] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag in (
                    "tag:yaml.org,2002:merge",  # `<<: *anchor` may repeat keys on purpose
                    "tag:yaml.org,2002:value",
                ):
                    continue
                first = seen.setdefault((key_node.tag, key_node.value), key_node)
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key_node.value!r} given twice in one mapping (first at line "
                        f"{first.start_mark.line + 1}); YAML would keep only the last",
                        key_node.start_mark,
                    )
        super().flatten_mapping(node)

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._checked: set[int] = set()


def load_yaml_strict(text: str) -> Any:
    r"""`yaml.safe_load`, with a key given twice in one mapping an error (`_UniqueKeyLoader`).

    >>> load_yaml_strict("trainer: {seed: 1}")
    {'trainer': {'seed': 1}}
    >>> try:
    ...     load_yaml_strict("trainer:\n  seed: 1\ntrainer:\n  seed: 2\n")
    ... except yaml.YAMLError as err:
    ...     print(err.problem, "| line", err.problem_mark.line + 1)
    key 'trainer' given twice in one mapping (first at line 1); YAML would keep only the last | line 3
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def read_recipe_data(path: Path, overrides: list[str]) -> dict[str, Any]:
    """The recipe file's YAML data with the overrides applied, before any default is filled in or any
    value checked: what the file and the command line say. Raises `RecipeError` with a one-line message."""
    source = str(path) + (f" (with overrides {' '.join(overrides)})" if overrides else "")
    if path.is_dir():
        raise RecipeError(str(path), "", "is a folder, not a recipe file (a .yaml file).")
    if not path.is_file():
        raise RecipeError(str(path), "", "no such recipe file.")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise RecipeError(
            str(path), "", f"not UTF-8 text ({err.reason} at byte {err.start}); save the recipe as UTF-8."
        ) from None
    try:
        data = load_yaml_strict(text)
    except yaml.YAMLError as err:
        raise yaml_error(str(path), text, err) from None
    if not isinstance(data, dict):
        raise RecipeError(
            str(path), "", "a recipe must be a YAML mapping with sections model, dataset, prompt, ..."
        )
    return apply_overrides(data, overrides, source)


def yaml_error(source: str, text: str, err: yaml.YAMLError) -> RecipeError:
    r"""A YAML syntax error as `file:line:column: problem`, then the offending line(s) with a caret.

    PyYAML's own text names the file `<unicode string>` and spreads over several lines; this is the one
    place a recipe error takes more than one line, as the caret needs the line above it.

    >>> try:
    ...     yaml.safe_load("trainer:\n  seed 0: x: y\n")
    ... except yaml.YAMLError as err:
    ...     print(yaml_error("mine.yaml", "trainer:\n  seed 0: x: y\n", err))
    mine.yaml:2:12: not valid YAML: mapping values are not allowed here
        2 |   seed 0: x: y
          |            ^
    """
    mark = getattr(err, "problem_mark", None)
    if mark is None:  # not a syntax error with a position (PyYAML raises none such today)
        return RecipeError(source, "", f"not valid YAML: {err}".replace("\n", " "))
    lines = text.splitlines()
    problem = getattr(err, "problem", None) or "syntax error"
    shown = [mark]
    context, context_mark = getattr(err, "context", None), getattr(err, "context_mark", None)
    if context and context_mark is not None:
        problem += f" ({context} at line {context_mark.line + 1}, column {context_mark.column + 1})"
        if context_mark.line != mark.line:
            shown.insert(0, context_mark)
    width = len(str(max(m.line for m in shown) + 1))
    snippet = []
    for where in shown:
        line = lines[where.line] if where.line < len(lines) else ""
        # The caret's indent copies the line's tabs, so it sits under the column however tabs are shown.
        indent = "".join(c if c == "\t" else " " for c in line[: where.column])
        label = "" if where.line < len(lines) else " (end of file)"
        snippet.append(f"    {where.line + 1:>{width}} | {line}{label}")
        snippet.append(f"    {'':>{width}} | {indent}^")
    location = f"{source}:{mark.line + 1}:{mark.column + 1}"
    return RecipeError(location, "", f"not valid YAML: {problem}\n" + "\n".join(snippet))


def resolve_recipe_path(name_or_path: str, recipes_dir: str | Path = "recipes") -> Path:
    """`gsm8k` -> recipes/gsm8k.yaml; a path is returned as it is."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        return candidate
    return Path(recipes_dir) / f"{name_or_path}.yaml"
