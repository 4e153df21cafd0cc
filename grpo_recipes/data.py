"""Dataset -> prompts. The one place where a row becomes a prompt and its ground truth becomes `solution`.

Training, evaluation and the reward audit all call `build_prompt` and `load_splits`; none formats a prompt
on its own.

Example:
    >>> from grpo_recipes.recipe import PromptSpec
    >>> spec = PromptSpec(user="Calculate {question}.", solution_column="answer", system="Be brief.")
    >>> build_prompt({"question": "2 + 2", "answer": "4"}, spec)
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Calculate 2 + 2.'}]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .recipe import (
    LOCAL_DATA_SUFFIXES,
    CurriculumSpec,
    DatasetSpec,
    PromptSpec,
    Recipe,
    RecipeError,
    check_columns,
    data_suffix,
    is_local_data_file,
)
from .tasks import GENERATORS, HELD_OUT_SEED_OFFSET

Prompt = str | list[dict[str, str]]


def build_prompt(row: dict[str, Any], spec: PromptSpec) -> Prompt:
    """The prompt for one dataset row: a list of chat messages, or plain text when not conversational."""
    user = spec.user.format_map(row)
    system = spec.system.format_map(row) if spec.system else None
    if spec.conversational:
        messages = [{"role": "system", "content": system}] if system else []
        return messages + [{"role": "user", "content": user}]
    return f"{system}\n\n{user}" if system else user


def with_prompts(dataset, spec: PromptSpec):
    """Add the `prompt` and `solution` columns TRL's GRPOTrainer and our rewards read."""
    return dataset.map(
        lambda row: {"prompt": build_prompt(row, spec), "solution": row[spec.solution_column]},
        desc="Building prompts",
    )


def load_local_file(path: str):
    """A local file's rows as a `datasets.Dataset`, each value of the type the file gives it.

    JSON and JSON lines are read with `json` and CSV with `csv` (every value a string), not by `datasets`'
    builders: those infer types from the text (an ISO date string becomes a datetime, a CSV column of digits
    an int), so a reward comparing strings would score 0 on every completion. Parquet files carry their types.
    Every reason the file cannot be used is one `DataFileError` line naming it.
    """
    try:
        dataset = _read_local_file(path)
    except DataFileError:
        raise
    except Exception as err:  # a file that is not Parquet, a CSV that is not UTF-8, a folder
        raise DataFileError(
            f"{path}: cannot be read ({type(err).__name__}: {err})".replace("\n", " ")
        ) from None
    if len(dataset) == 0:
        raise DataFileError(f"{path}: no rows.")
    return dataset


def _read_local_file(path: str):
    import datasets

    if data_suffix(path) == ".parquet":
        import pyarrow.parquet

        # `datasets` refuses a file without rows in words of its own ("Instruction 'train' corresponds to
        # no data"): say it as for the other kinds.
        if pyarrow.parquet.read_metadata(path).num_rows == 0:
            raise DataFileError(f"{path}: no rows.")
        return datasets.load_dataset("parquet", data_files=path, split="train")
    rows = read_rows(path)
    try:
        return datasets.Dataset.from_list(rows)
    except Exception as err:  # pyarrow: a column whose values are of several types
        raise DataFileError(
            f"{path}: {_mixed_column(rows) or type(err).__name__ + ': ' + str(err)}"
        ) from None


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a .jsonl (one JSON object a line), .json (a list of objects, or JSON lines) or .csv file."""
    import csv

    path = Path(path)
    if data_suffix(path) == ".csv":
        with path.open(newline="", encoding="utf-8-sig") as file:  # -sig: a byte-order mark is not a column
            return [dict(row) for row in csv.DictReader(file)]
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataFileError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}).") from None
    if data_suffix(path) == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except ValueError as err:
            raise DataFileError(f"{path}: not a JSON list of objects: {err}") from None
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as err:
                    raise DataFileError(f"{path}:{number}: not a JSON object: {err}") from None
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise DataFileError(f"{path}: row {number} is a {type(row).__name__}, not an object.")
    return rows


def _mixed_column(rows: list[dict[str, Any]]) -> str:
    """Which column mixes value types (a string in one row, a number in another), in words; "" if none."""
    seen: dict[str, tuple[str, int]] = {}
    for number, row in enumerate(rows, 1):
        for key, value in row.items():
            kind = type(value).__name__ if value is not None else None
            if kind is None:
                continue
            first = seen.setdefault(key, (kind, number))
            if first[0] != kind and {first[0], kind} != {"int", "float"}:
                return (
                    f"column '{key}' is a {first[0]} in row {first[1]} and a {kind} in row {number}: "
                    "give it one type in every row."
                )
    return ""


class DataFileError(ValueError):
    """A data file named on the command line that cannot be used: its message names the file and why."""


def read_data_file(path: str | Path, limit: int | None = None):
    """A local .jsonl/.json/.parquet/.csv file's rows as a `datasets.Dataset`, read as training reads one.

    The first `limit` rows only, when given. Every reason it cannot be used is one `DataFileError` line:
    a suffix we do not read, no such file, a file `datasets` cannot parse, no rows.
    """
    path = Path(path)
    if not is_local_data_file(path):
        raise DataFileError(f"{path}: unsupported data file; use one of {', '.join(LOCAL_DATA_SUFFIXES)}.")
    if not path.is_file():
        raise DataFileError(f"{path}: no such data file.")
    dataset = load_local_file(str(path))
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    return dataset


def load_hub_split(path: str, config: str | None, split: str):
    """One split of a Hub dataset (cached by `datasets`; offline it must be in the cache)."""
    import datasets

    return datasets.load_dataset(path, config, split=split)


@dataclass(frozen=True)
class DataSource:
    """One set of rows a recipe's `dataset` section names: a local file, or one split of a Hub dataset."""

    key: str
    """The recipe key that names it (`dataset.path`, `dataset.eval_path`, `dataset.eval_split`)."""
    path: str
    config: str | None
    split: str

    @property
    def local(self) -> bool:
        return is_local_data_file(self.path)

    def describe(self) -> str:
        return f"{self.key} {self.path}" + ("" if self.local else f" (split {self.split})")

    def load(self):
        """Its rows as a `datasets.Dataset`."""
        return (
            load_local_file(self.path) if self.local else load_hub_split(self.path, self.config, self.split)
        )


def data_sources(spec: DatasetSpec) -> tuple[DataSource, DataSource | None]:
    """The training rows and the held-out rows (None: the recipe names none) of a dataset without a generator.

    >>> from grpo_recipes.recipe import DatasetSpec
    >>> data_sources(DatasetSpec(path="openai/gsm8k", config="main", eval_split="test"))[1].describe()
    'dataset.eval_split openai/gsm8k (split test)'
    """
    train = DataSource("dataset.path", spec.path, spec.config, spec.train_split)
    if spec.eval_path:
        # A Hub dataset's config applies to its own splits, not to another dataset's.
        return train, DataSource("dataset.eval_path", spec.eval_path, None, spec.eval_split or "test")
    if spec.eval_split:
        return train, DataSource("dataset.eval_split", spec.path, spec.config, spec.eval_split)
    return train, None


#: Seed offset between the pools of two curriculum levels (level 0's pool uses the generator's seed itself).
LEVEL_SEED_OFFSET = 7_919


#: Seed offset of the warm-up's rows (`dataset.generator.warmup_size`) from the generator's seed.
WARMUP_SEED_OFFSET = 104_729


@dataclass
class GeneratedRows:
    train: list[dict[str, Any]]
    held_out: list[dict[str, Any]]
    warmup: list[dict[str, Any]]
    """The warm-up's rows (`dataset.generator.warmup_size`; empty: none apart)."""


def generated_splits(
    spec: DatasetSpec, curriculum: CurriculumSpec | None = None, source: str = "recipe"
) -> GeneratedRows:
    """The training, held-out and warm-up rows of the recipe's `dataset.generator`, no question in two of them.

    The held-out rows have the task's `params` (they measure the task itself). The warm-up's rows
    (`warmup_size` of them, shown worked, never trained on by GRPO) have `warmup_params` over `params`, and the
    training rows `train_params` over `params`. With a `curriculum`, they are one pool per level, in level order:
    `train_size` rows of that level's params each (seed: the generator's plus `LEVEL_SEED_OFFSET` per level),
    each row tagged with its `curriculum_level` and its place in the pool (`curriculum_row`).

    >>> from grpo_recipes.recipe import CurriculumSpec, GeneratorSpec
    >>> spec = DatasetSpec(generator=GeneratorSpec("arithmetic", 4, 3, params={"max_ops": 1}, warmup_size=2))
    >>> rows = generated_splits(spec, CurriculumSpec(levels=[{"max_operand": 3}, {}]))
    >>> [row["curriculum_level"] for row in rows.train], len(rows.held_out), len(rows.warmup)
    ([0, 0, 0, 0, 1, 1, 1, 1], 3, 2)
    """
    gen = spec.generator
    generator = GENERATORS[gen.name]
    if curriculum is None and not gen.train_params and not gen.warmup_size:
        try:
            train, held_out = generator.splits(gen.train_size, gen.eval_size, gen.seed, **gen.params)
        except ValueError as err:
            raise RecipeError(source, "dataset.generator", str(err)) from None
        return GeneratedRows(train, held_out, [])
    try:
        held_out = generator.generate(gen.eval_size, seed=gen.seed + HELD_OUT_SEED_OFFSET, **gen.params)
    except ValueError as err:
        raise RecipeError(source, "dataset.generator.eval_size", str(err)) from None
    key = getattr(generator, "key", "question")
    exclude = {row[key] for row in held_out}
    warmup: list[dict[str, Any]] = []
    if gen.warmup_size:
        try:
            warmup = generator.generate(
                gen.warmup_size,
                seed=gen.seed + WARMUP_SEED_OFFSET,
                exclude=exclude,
                **{**gen.params, **gen.warmup_params},
            )
        except ValueError as err:
            raise RecipeError(source, "dataset.generator.warmup_size", str(err)) from None
        exclude |= {row[key] for row in warmup}
    if curriculum is None:
        try:
            train = generator.generate(
                gen.train_size, seed=gen.seed, exclude=exclude, **gen.training_params()
            )
        except ValueError as err:
            where = "train_params" if gen.train_params else "train_size"
            raise RecipeError(source, f"dataset.generator.{where}", str(err)) from None
        return GeneratedRows(train, held_out, warmup)
    train = []
    for level in range(len(curriculum.levels)):
        params = curriculum.level_params(gen.params, level)
        try:
            rows = generator.generate(
                gen.train_size, seed=gen.seed + LEVEL_SEED_OFFSET * level, exclude=exclude, **params
            )
        except ValueError as err:
            raise RecipeError(
                source, f"curriculum.levels.{level}", f"{err} (no level has the held-out questions)"
            ) from None
        train += [{**row, "curriculum_level": level, "curriculum_row": i} for i, row in enumerate(rows)]
    return GeneratedRows(train, held_out, warmup)


def generated_rows(
    spec: DatasetSpec, curriculum: CurriculumSpec | None = None, source: str = "recipe"
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The training and held-out rows of the recipe's `dataset.generator` (`generated_splits`'s).

    >>> from grpo_recipes.recipe import GeneratorSpec
    >>> train, held_out = generated_rows(DatasetSpec(generator=GeneratorSpec("arithmetic", 4, 3, params={"max_ops": 1})))
    >>> len(train), len(held_out)
    (4, 3)
    """
    rows = generated_splits(spec, curriculum, source)
    return rows.train, rows.held_out


def peek_columns(recipe: Recipe, held_out: bool = False) -> list[str] | None:
    """The dataset's columns without loading it, where that is cheap (a generator or a local .jsonl file).

    `held_out`: those of `dataset.eval_path` instead (None when there is none: the held-out rows then come
    from the same data as the training rows).
    """
    spec = recipe.dataset
    if spec.generator is not None:
        return None if held_out else list(GENERATORS[spec.generator.name].columns)
    path = spec.eval_path if held_out else spec.path
    if path is None or data_suffix(path) != ".jsonl" or not Path(path).is_file():
        return None
    try:
        with open(path, encoding="utf-8-sig") as handle:
            first = next((line for line in handle if line.strip()), "")
    except UnicodeDecodeError:
        return None
    try:
        row = json.loads(first)
    except ValueError:
        row = None
    # An empty file, a line that is not a JSON object: the full load says which line and why (`read_rows`).
    return list(row) if isinstance(row, dict) else None


@dataclass
class Splits:
    train: Any
    """A `datasets.Dataset` with the source columns plus `prompt` and `solution`."""
    eval: Any | None
    """Held-out rows for evaluation, same columns; None when the recipe has none and evaluation is off."""
    held_out_of_train: int = 0
    """Rows taken out of the training data for evaluation, when the recipe names no held-out data."""
    rows_before_hold_out: int = 0
    """The training data's rows before any were held out."""
    level_bounds: list[tuple[int, int]] | None = None
    """With a curriculum: each level's pool of training rows, as (first row, end) in `train`, easy to hard."""
    warmup: Any | None = None
    """Rows generated apart for the warm-up's demonstrations (`dataset.generator.warmup_size`), with prompts;
    None: the warm-up shows training rows."""

    def level_rows(self, level: int) -> Any:
        """The training rows of one curriculum level's pool."""
        first, end = self.level_bounds[level]
        return self.train.select(range(first, end))

    def describe(self) -> str:
        """The log line about the data: row counts, and where held-out rows came out of the training data.

        >>> Splits(train=range(64), eval=range(16), held_out_of_train=16, rows_before_hold_out=80).describe()
        'dataset: 64 training rows, 16 held-out rows (the recipe names no held-out data, dataset.eval_path or dataset.eval_split, so 16 of its 80 rows, a fifth at most, are held out of training for evaluation)'
        """
        line = f"dataset: {len(self.train)} training rows, {len(self.eval) if self.eval else 0} held-out rows"
        if self.held_out_of_train:
            line += (
                " (the recipe names no held-out data, dataset.eval_path or dataset.eval_split, so "
                f"{self.held_out_of_train} of its {self.rows_before_hold_out} rows, a fifth at most, are held "
                "out of training for evaluation)"
            )
        if self.level_bounds:
            line += f" ({len(self.level_bounds)} curriculum levels of {self.level_bounds[0][1]} rows each)"
        if self.warmup is not None:
            line += f", {len(self.warmup)} rows apart for the warm-up's demonstrations"
        return line


def load_splits(recipe: Recipe) -> Splits:
    """Load (or generate) the train and held-out splits, check their columns, and build the prompts.

    When the dataset has no held-out split and evaluation is enabled, the last `evaluation.max_samples`
    rows (after shuffling), at most a fifth of them, are held out of training for it; `Splits.describe`
    says so.
    """
    import datasets

    spec = recipe.dataset
    eval_set = warmup = None
    curriculum = recipe.curriculum
    if spec.generator is not None:
        rows = generated_splits(spec, curriculum, recipe.source)
        train, eval_set = datasets.Dataset.from_list(rows.train), datasets.Dataset.from_list(rows.held_out)
        if rows.warmup:
            warmup = with_prompts(datasets.Dataset.from_list(rows.warmup), recipe.prompt)
    else:
        train_source, held_out_source = data_sources(spec)
        train = _load(train_source, recipe.source)
        if held_out_source is not None:
            eval_set = _load(held_out_source, recipe.source)
        if eval_set is not None:  # other data than the training rows: its columns may differ
            check_columns(recipe, eval_set.column_names, held_out=True)

    check_columns(recipe, train.column_names)
    if curriculum is not None:  # the pools stay in level order; each is already in random order
        pool = len(train) // len(curriculum.levels)
        size = min(pool, spec.max_train_samples or pool)
        train = train.select(
            [level * pool + i for level in range(len(curriculum.levels)) for i in range(size)]
        )
        return Splits(
            train=with_prompts(train, recipe.prompt),
            eval=_held_out(recipe, eval_set),
            level_bounds=[(level * size, (level + 1) * size) for level in range(len(curriculum.levels))],
            warmup=warmup,
        )
    if spec.shuffle_seed is not None:
        train = train.shuffle(seed=spec.shuffle_seed)
    held, total = 0, len(train)
    if eval_set is None and recipe.evaluation.enabled:
        held = min(recipe.evaluation.max_samples, len(train) // 5)
        if held == 0:
            raise RecipeError(
                recipe.source,
                "dataset.path",
                f"{total} row(s): too few to hold a fifth out for the held-out evaluation (5 rows at least); "
                "name held-out rows (dataset.eval_path or dataset.eval_split), or set evaluation.enabled: false.",
            )
        train, eval_set = (
            train.select(range(len(train) - held)),
            train.select(range(len(train) - held, len(train))),
        )
    if spec.max_train_samples is not None:
        train = train.select(range(min(spec.max_train_samples, len(train))))
    return Splits(
        train=with_prompts(train, recipe.prompt),
        eval=_held_out(recipe, eval_set),
        held_out_of_train=held,
        rows_before_hold_out=total,
        warmup=warmup,
    )


def _load(source: DataSource, recipe_source: str) -> Any:
    """`source.load()`, its failure a `RecipeError` on the key that names it: a local file's reason
    (`DataFileError`), or a Hub dataset that could not be reached."""
    try:
        return source.load()
    except DataFileError as err:
        raise RecipeError(recipe_source, source.key, str(err)) from None
    except Exception as err:
        if source.local:
            raise
        raise RecipeError(
            recipe_source,
            source.key,
            f"could not load {source.path} (split {source.split}): {type(err).__name__}: {err} (if offline, a "
            f"Hub dataset must be in the local cache; or set {source.key} to a local file)",
        ) from None


def _held_out(recipe: Recipe, eval_set: Any) -> Any:
    """The held-out rows evaluation uses (at most `max_eval_samples` and `evaluation.max_samples`), with prompts."""
    if eval_set is None:
        return None
    spec = recipe.dataset
    limit = min(
        x for x in (spec.max_eval_samples, recipe.evaluation.max_samples, len(eval_set)) if x is not None
    )
    return with_prompts(eval_set.select(range(limit)), recipe.prompt)
