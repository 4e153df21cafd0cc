"""The recipe: one YAML file that pairs a dataset, a model and reward functions with GRPO settings.

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

import dataclasses
import difflib
import math
import string
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

import rewards as reward_registry

from .tasks import GENERATORS

LOCAL_DATA_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


class RecipeError(ValueError):
    """A recipe problem, reported as one line: the file, the key path, what is wrong and what is allowed."""

    def __init__(self, source: str, key: str, problem: str, allowed: list[str] | None = None):
        self.source, self.key, self.problem = source, key, problem
        message = f"{source}: {key}: {problem}" if key else f"{source}: {problem}"
        super().__init__(message)


def _suggest(name: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


def _unknown_key(source: str, key: str, name: str, allowed: list[str], list_all: bool = True) -> RecipeError:
    listing = f" Allowed: {', '.join(allowed)}." if list_all else ""
    return RecipeError(source, key, f"unknown key '{name}'.{listing}{_suggest(name, allowed)}")


# --------------------------------------------------------------------------------------------------------
# Schema. Each section is a dataclass; its fields are the allowed keys, their types are checked on load.
# --------------------------------------------------------------------------------------------------------


@dataclass
class LoraSpec:
    """PEFT LoRA adapter settings; present only when the recipe trains an adapter instead of all weights."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] | str = "all-linear"


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


@dataclass
class GeneratorSpec:
    name: str
    train_size: int = 2000
    eval_size: int = 200
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class DatasetSpec:
    path: str | None = None
    """A Hub dataset id, or a local .jsonl/.json/.parquet/.csv file (relative to the working directory)."""
    config: str | None = None
    train_split: str = "train"
    eval_split: str | None = None
    """The held-out split: of `eval_path` when given (a Hub id), else of `path`."""
    eval_path: str | None = None
    """A separate held-out dataset: a Hub id (with `eval_split`) or a local file."""
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
class EvaluationSpec:
    """Greedy accuracy on held-out rows before and after training."""

    enabled: bool = True
    max_samples: int = 200
    reward: str | None = None
    """The reward that decides correctness (a name from `rewards`); default: the recipe's first reward."""
    max_new_tokens: int | None = None
    """Default: trainer.max_completion_length."""
    batch_size: int = 50


@dataclass
class AuditSpec:
    """How `scripts/audit_rewards.py` writes an ideal completion from a row's gold solution."""

    completion_template: str = "{reasoning}\n\nThe final answer is \\boxed{{{answer}}}."
    """Filled with {reasoning} (the gold solution's text) and {answer} (its final answer)."""
    gold_answer: Literal["raw", "gsm8k", "boxed"] = "raw"
    """How the final answer is read from the gold: the whole value, after `####`, or the last \\boxed{}."""


@dataclass
class Recipe:
    model: ModelSpec
    dataset: DatasetSpec
    prompt: PromptSpec
    rewards: list[RewardSpec]
    trainer: dict[str, Any] = field(default_factory=dict)
    """Passed to TRL's GRPOConfig: any of its fields; unknown ones are an error."""
    evaluation: EvaluationSpec = field(default_factory=EvaluationSpec)
    audit: AuditSpec = field(default_factory=AuditSpec)
    description: str = ""
    name: str = ""
    """Set from the file name; not a key in the file."""
    source: str = ""
    """Where the recipe came from, with the overrides applied; not a key in the file."""

    def to_dict(self) -> dict[str, Any]:
        """The recipe as plain data, in the shape of the file (for writing the resolved recipe)."""
        data = dataclasses.asdict(self)
        data.pop("name")
        data.pop("source")
        return data

    @property
    def evaluation_reward(self) -> RewardSpec:
        """The reward that decides whether an evaluation answer is correct."""
        if self.evaluation.reward is None:
            return self.rewards[0]
        for spec in self.rewards:
            if spec.name == self.evaluation.reward:
                return spec
        return RewardSpec(name=self.evaluation.reward)


RECIPE_INTERNAL_FIELDS = {"name", "source"}

# --------------------------------------------------------------------------------------------------------
# Type checking of plain YAML data against the schema.
# --------------------------------------------------------------------------------------------------------


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        type(None): "null",
    }.get(tp, getattr(tp, "__name__", str(tp)))


def _convert(value: Any, tp: Any, source: str, key: str) -> Any:
    """Return `value` checked (and, for numbers written as strings like 1e-6, converted) against `tp`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:  # Optional[X]: report X's own error (an unknown key inside a section, say)
            return _convert(value, non_null[0], source, key)
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, source, key)
            except RecipeError:
                continue
        raise RecipeError(source, key, f"expected {_type_name(tp)}, got {value!r}.")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            hint = _suggest(str(value), [str(a) for a in allowed])
            raise RecipeError(source, key, f"got {value!r}; allowed: {', '.join(map(str, allowed))}.{hint}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise RecipeError(source, key, f"expected {_type_name(tp)}, got {value!r}.")
        (item_tp,) = typing.get_args(tp)
        return [_convert(v, item_tp, source, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise RecipeError(source, key, f"expected a mapping, got {value!r}.")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, source, key)
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise RecipeError(source, key, f"expected true or false, got {value!r}.")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecipeError(source, key, f"expected an integer, got {value!r}.")
        return value
    if tp is float:
        return _as_float(value, source, key)
    if tp is str:
        if not isinstance(value, str):
            raise RecipeError(source, key, f"expected a string, got {value!r}.")
        return value
    return value


def _as_float(value: Any, source: str, key: str) -> float:
    # YAML 1.1 reads `1e-6` (no dot) as a string; accept numeric strings rather than fail on a common spelling.
    if isinstance(value, bool):
        raise RecipeError(source, key, f"expected a number, got {value!r}.")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if math.isfinite(number):
                return number
    raise RecipeError(source, key, f"expected a number, got {value!r}.")


def _build(cls: type, data: Any, source: str, key: str) -> Any:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and missing required ones."""
    section = key or "recipe"
    if not isinstance(data, dict):
        raise RecipeError(source, section, f"expected a mapping, got {data!r}.")
    hints = typing.get_type_hints(cls)
    internal = RECIPE_INTERNAL_FIELDS if cls is Recipe else set()
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in internal}
    kwargs = {}
    for name, value in data.items():
        path = f"{key}.{name}" if key else str(name)
        if name not in fields:
            raise _unknown_key(source, section, str(name), list(fields))
        kwargs[name] = _convert(value, hints[name], source, path)
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and name not in kwargs:
            raise RecipeError(
                source, f"{key}.{name}" if key else name, f"missing required key ({_type_name(hints[name])})."
            )
    return cls(**kwargs)


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
        value = yaml.safe_load(raw) if raw.strip() else None
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


def _check_rewards(recipe: Recipe, source: str) -> None:
    if not recipe.rewards:
        raise RecipeError(source, "rewards", "at least one reward is required.")
    available = reward_registry.available_rewards()
    for i, spec in enumerate(recipe.rewards):
        if spec.name not in available:
            raise RecipeError(
                source,
                f"rewards[{i}].name",
                f"unknown reward '{spec.name}'. Allowed: {', '.join(available)}.{_suggest(spec.name, available)}",
            )
        try:
            reward_registry.get_reward(spec.name, **spec.params)
        except (TypeError, ValueError) as err:
            raise RecipeError(source, f"rewards[{i}].params", str(err)) from None
    if recipe.evaluation.reward is not None and recipe.evaluation.reward not in available:
        name = recipe.evaluation.reward
        raise RecipeError(
            source,
            "evaluation.reward",
            f"unknown reward '{name}'. Allowed: {', '.join(available)}.{_suggest(name, available)}",
        )


def _check_dataset(recipe: Recipe, source: str) -> None:
    spec = recipe.dataset
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
                f"{_suggest(spec.generator.name, names)}",
            )
        generator = GENERATORS[spec.generator.name]
        try:
            generator.check_params(spec.generator.params)
        except (TypeError, ValueError) as err:
            raise RecipeError(source, "dataset.generator.params", str(err)) from None
        capacity = generator.capacity(**spec.generator.params)
        if spec.generator.train_size + spec.generator.eval_size > capacity:
            raise RecipeError(
                source,
                "dataset.generator",
                f"train_size {spec.generator.train_size} + eval_size {spec.generator.eval_size} exceed the "
                f"{capacity} distinct problems its params allow.",
            )
    else:
        for key in ("path", "eval_path"):
            value = getattr(spec, key)
            if value is not None and Path(value).suffix in LOCAL_DATA_SUFFIXES and not Path(value).exists():
                raise RecipeError(source, f"dataset.{key}", f"local file {value} does not exist.")
        eval_source = spec.eval_path or spec.path
        if Path(eval_source).suffix in LOCAL_DATA_SUFFIXES and spec.eval_split is not None:
            raise RecipeError(
                source, "dataset.eval_split", "a local file has no splits; use dataset.eval_path."
            )


def trainer_fields() -> dict[str, dataclasses.Field]:
    """The keys allowed in a recipe's `trainer` section: the fields of TRL's GRPOConfig."""
    from trl import GRPOConfig  # imported here: trl pulls in torch, which plain parsing does not need

    return {f.name: f for f in dataclasses.fields(GRPOConfig) if f.init}


def _check_trainer(recipe: Recipe, source: str) -> None:
    fields = trainer_fields()
    for name, value in list(recipe.trainer.items()):
        key = f"trainer.{name}"
        if name not in fields:
            raise _unknown_key(source, "trainer", name, list(fields), list_all=False)
        tp = fields[name].type
        # GRPOConfig annotates with strings under `from __future__ import annotations` in some releases.
        tp = {"float": float, "int": int, "bool": bool, "str": str}.get(tp, tp) if isinstance(tp, str) else tp
        if tp is float:
            recipe.trainer[name] = _as_float(value, source, key)
        elif tp is int or tp is bool:
            recipe.trainer[name] = _convert(value, tp, source, key)


def check_columns(recipe: Recipe, columns: list[str]) -> None:
    """Check that the prompt's placeholders and the ground-truth column exist in the dataset's `columns`."""
    for where, template in (("prompt.user", recipe.prompt.user), ("prompt.system", recipe.prompt.system)):
        for name in template_placeholders(template or ""):
            if name not in columns:
                raise RecipeError(
                    recipe.source,
                    where,
                    f"placeholder {{{name}}} has no matching dataset column. Columns: {', '.join(columns)}."
                    f"{_suggest(name, columns)}",
                )
    if recipe.prompt.solution_column not in columns:
        name = recipe.prompt.solution_column
        raise RecipeError(
            recipe.source,
            "prompt.solution_column",
            f"column '{name}' is not in the dataset. Columns: {', '.join(columns)}.{_suggest(name, columns)}",
        )


def parse_recipe(data: Any, source: str, name: str = "recipe", check_trainer: bool = True) -> Recipe:
    """Validate raw recipe data (a mapping, as read from YAML) and return the `Recipe`."""
    recipe = _build(Recipe, data, source, "")
    recipe.name, recipe.source = name, source
    _check_dataset(recipe, source)
    _check_prompt(recipe, source)
    _check_rewards(recipe, source)
    if check_trainer:
        _check_trainer(recipe, source)
    return recipe


def load_recipe(path: str | Path, overrides: list[str] | None = None, check_trainer: bool = True) -> Recipe:
    """Read, override and validate a recipe file. Raises `RecipeError` with a one-line message."""
    path = Path(path)
    overrides = list(overrides or [])
    source = str(path) + (f" (with overrides {' '.join(overrides)})" if overrides else "")
    if not path.is_file():
        raise RecipeError(str(path), "", "no such recipe file.")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise RecipeError(str(path), "", f"not valid YAML: {err}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise RecipeError(
            str(path), "", "a recipe must be a YAML mapping with sections model, dataset, prompt, ..."
        )
    apply_overrides(data, overrides, source)
    return parse_recipe(data, source, name=path.stem, check_trainer=check_trainer)


def resolve_recipe_path(name_or_path: str, recipes_dir: str | Path = "recipes") -> Path:
    """`gsm8k` -> recipes/gsm8k.yaml; a path is returned as it is."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        return candidate
    return Path(recipes_dir) / f"{name_or_path}.yaml"
