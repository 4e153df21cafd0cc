"""Sweeps: one recipe trained once per value of a setting and per seed, at an equal wall-clock budget.

A sweep (`make ablate`, `scripts/ablate.py`) runs `scripts/train.py` one run at a time, each stopped by
`--time-limit` after `budget_minutes` of training (or at the recipe's `max_steps`), each evaluated greedily on
the same held-out problems. It then compares every value with the first one: held-out accuracy with its
interval, and the paired difference on the same problems, pooled over seeds.

A sweep is a small YAML file (`sweeps/*.yaml`), or the command line's `--key` and `--values`:

    name: loss-type                  # the results go to <root>/loss-type/sweep.{json,md,png}
    recipe: recipes/default.yaml
    budget_minutes: 4                # training wall-clock per run (evaluation not counted)
    seeds: 1                         # trainer.seed 0, 1, ... n-1 for every value
    overrides: []                    # key.path=value overrides for every run
    values:                          # the first is the reference of the paired differences
      - {name: dapo, set: {}}        # `set`: dotted recipe keys and their values for this value's runs
      - {name: grpo, set: {trainer.loss_type: grpo}}

Runs are stored once under `<root>/runs/`, named by a hash of everything that decides them (the recipe
file's settings with the overrides and the seed applied, and the budget): a sweep interrupted half way resumes without redoing finished runs, and two
sweeps that share a run (the recipe as it is, in most of them) train it once.

Example:
    >>> sweep = Sweep.from_values("recipes/default.yaml", "trainer.loss_type", "grpo,dr_grpo", seeds=1,
    ...                           budget_minutes=4)
    >>> [(value.name, value.overrides) for value in sweep.values]
    [('grpo', ['trainer.loss_type=grpo']), ('dr_grpo', ['trainer.loss_type=dr_grpo'])]
    >>> pooled_paired_difference({0: [1, 1, 0, 0]}, {0: [0, 1, 0, 1]})
    {'difference': 0.0, 'low': -0.8002, 'high': 0.8002, 'pairs': 4, 'seeds': 1}
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rewards.typecheck import FieldError, check_value

from ..recipe import RecipeError, load_recipe, load_yaml_strict, read_recipe_data
from .metrics import paired_difference, wilson_interval

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ROOT = Path("outputs") / "ablate"


class SweepError(ValueError):
    """A sweep file or command line that cannot run: the message names the file, the key and why."""


#: What `lift_max_steps` sets trainer.max_steps to: no budget of minutes on any machine reaches it.
LIFTED_MAX_STEPS = 1_000_000


@dataclass(frozen=True)
class SweepValue:
    """One value of the swept setting: a name for the tables, and the recipe overrides that make it."""

    name: str
    overrides: list[str]


@dataclass
class Sweep:
    name: str
    recipe: Path
    values: list[SweepValue]
    seeds: int = 1
    budget_minutes: float = 4.0
    overrides: list[str] = field(default_factory=list)
    """Overrides for every run (before each value's own)."""
    source: str = "command line"
    launch: str = ""
    """How each run is started, as for `make train LAUNCH=...` (e.g. `accelerate launch --config_file
    configs/ddp.yaml --num_processes 2`); "" runs `python scripts/train.py` in one process."""
    description: str = ""
    """What the sweep measures: which state of the recipe (what its overrides pin), shown over its table."""
    reach: str | float | None = None
    """A value's name, or a held-out accuracy as a fraction (`0.818`, e.g. a final measured in another
    sweep): the table gives, for every value, the minutes of training its runs took to reach that value's
    pooled final held-out accuracy, or that accuracy, read from each run's held-out curve (points between its
    two ends where the runs evaluate during training: `evaluation.every_steps`)."""

    @classmethod
    def from_values(
        cls,
        recipe: str | Path,
        key: str,
        values: str,
        seeds: int = 1,
        budget_minutes: float = 4.0,
        overrides: Sequence[str] = (),
        launch: str = "",
    ) -> Sweep:
        """The sweep of `key` over comma-separated `values` (each read as YAML, like any override)."""
        names = [v.strip() for v in values.split(",") if v.strip()]
        if not key or len(names) < 2:
            raise SweepError(f"a sweep needs KEY and at least two VALUES, got KEY={key!r} VALUES={values!r}")
        sweep = cls(
            name=f"{Path(recipe).stem}-{key}",
            recipe=Path(recipe),
            values=[SweepValue(v, [f"{key}={v}"]) for v in names],
            seeds=seeds,
            budget_minutes=budget_minutes,
            overrides=list(overrides),
            launch=launch,
        )
        sweep.check()
        return sweep

    def lift_max_steps(self) -> None:
        """Let the budget end every run: `trainer.max_steps` set far above what the budget reaches, before
        every other override (a sweep file's or the command line's own max_steps still wins)."""
        self.overrides.insert(0, f"trainer.max_steps={LIFTED_MAX_STEPS}")

    @classmethod
    def from_file(cls, path: str | Path, **replace: Any) -> Sweep:
        """A sweep file; `replace` (recipe, seeds, budget_minutes) wins over the file's own values, and its
        `overrides` are applied after the file's."""
        path = Path(path)
        try:
            data = load_yaml_strict(path.read_text(encoding="utf-8"))  # a key given twice is an error
        except UnicodeDecodeError as err:
            raise SweepError(
                f"{path}: cannot read the sweep: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset "
                f"{err.start}); save the file as UTF-8"
            ) from None
        except (OSError, yaml.YAMLError) as err:
            raise SweepError(f"{path}: cannot read the sweep: {err}".replace("\n", " ")) from None
        allowed = {
            "name",
            "recipe",
            "values",
            "seeds",
            "budget_minutes",
            "overrides",
            "description",
            "launch",
            "reach",
        }
        if not isinstance(data, dict) or not {"recipe", "values"} <= set(data):
            raise SweepError(f"{path}: a sweep is a mapping with at least `recipe` and `values`")
        if unknown := set(data) - allowed:
            raise SweepError(
                f"{path}: unknown key {sorted(unknown, key=str)[0]!r}; allowed: {', '.join(sorted(allowed))}"
            )

        def bad(key: str, expected: str, got: Any) -> SweepError:
            return SweepError(f"{path}: {key}: expected {expected}, got {got!r}")

        recipe = data["recipe"]
        if not isinstance(recipe, str) or not recipe.strip():
            raise bad("recipe", "the path of a recipe file, e.g. recipes/default.yaml", recipe)
        seeds = data.get("seeds", 1)
        if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
            raise bad("seeds", "a whole number >= 1 (runs per value)", seeds)
        budget = data.get("budget_minutes", 4.0)
        try:  # a number, or a numeric string (YAML 1.1 reads `1e1` as one), as in a recipe
            budget = check_value(budget, float, "budget_minutes")
        except FieldError:
            budget = None
        if budget is None or not 0 < budget < math.inf:
            raise bad(
                "budget_minutes",
                "a number of minutes > 0 (or leave the key out for 4)",
                data["budget_minutes"],
            )
        overrides = data.get("overrides") or []
        if isinstance(overrides, str):
            raise SweepError(
                f"{path}: overrides: expected a list of key.path=value strings, e.g. `overrides: "
                f"[{', '.join(overrides.split())}]`, got the single string {overrides!r}"
            )
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            raise bad("overrides", "a list of key.path=value strings", overrides)
        if not isinstance(data.get("name"), str | None) and not _is_number(data["name"]):
            raise bad("name", "a string (the folder of the results)", data["name"])
        for key in ("launch", "description"):
            if not isinstance(data.get(key), str | None):
                raise bad(key, "a string", data[key])
        if not (data.get("reach") is None or isinstance(data["reach"], str) or _is_number(data["reach"])):
            raise bad("reach", "a value's name or an accuracy as a fraction (0.818)", data["reach"])
        if not isinstance(data["values"], list) or len(data["values"]) < 2:
            raise bad("values", "a list of at least two {name: ..., set: {key.path: value}}", data["values"])
        values = []
        for i, item in enumerate(data["values"]):
            if not isinstance(item, dict) or set(item) - {"name", "set"} or "name" not in item:
                raise SweepError(f"{path}: values.{i}: expected {{name: ..., set: {{key.path: value}}}}")
            name = item["name"]
            if not (isinstance(name, str) and name.strip() or _is_number(name)):
                quote = (
                    " (quote it: YAML reads on, off, yes and no as true and false)"
                    if isinstance(name, bool)
                    else ""
                )
                raise bad(f"values.{i}.name", f"a name for the tables (a string){quote}", name)
            settings = item.get("set") or {}
            if not isinstance(settings, dict) or not all(isinstance(k, str) for k in settings):
                raise SweepError(f"{path}: values.{i}.set: expected a mapping of key.path: value")
            try:
                # JSON is YAML: each value reaches the recipe exactly as written here (strings, numbers, mappings).
                written = [f"{k}={json.dumps(v)}" for k, v in settings.items()]
            except (TypeError, ValueError) as err:
                raise SweepError(f"{path}: values.{i}.set: {err}") from None
            values.append(SweepValue(str(name), written))
        recipe = Path(recipe)
        sweep = cls(
            name=str(data.get("name") or path.stem),
            recipe=recipe if recipe.is_absolute() or recipe.exists() else REPO / recipe,
            values=values,
            seeds=seeds,
            budget_minutes=budget,
            overrides=list(overrides),
            source=str(path),
            launch=data.get("launch") or "",
            description=" ".join((data.get("description") or "").split()),
            reach=_reach(data.get("reach"), [value.name for value in values]),
        )
        for key, value in replace.items():
            if key == "overrides":  # after the file's own: on the same key the command line wins
                sweep.overrides += list(value or [])
            elif key == "recipe" and value is not None:
                sweep.recipe = Path(value)
            elif key == "launch" and value:
                sweep.launch = value
            elif value is not None:
                setattr(sweep, key, value)
        sweep.check()
        return sweep

    def check(self) -> None:
        """Every run's recipe loads and validates (before any model does); names are distinct."""
        if len(self.values) < 2:
            raise SweepError(f"{self.source}: a sweep needs at least two values")
        names = [value.name for value in self.values]
        if len(set(names)) != len(names):
            raise SweepError(f"{self.source}: value names repeat: {names}")
        if self.seeds < 1 or not 0 < self.budget_minutes < math.inf:
            raise SweepError(f"{self.source}: need seeds >= 1 and a finite budget_minutes > 0")
        if isinstance(self.reach, float) and not 0 < self.reach <= 1:
            raise SweepError(
                f"{self.source}: reach: {self.reach:g} is not an accuracy: give a fraction in (0, 1] "
                f"(0.818 for 81.8 %) or a value's name"
            )
        if isinstance(self.reach, str) and self.reach not in names:
            raise SweepError(
                f"{self.source}: reach: {self.reach!r} is not a value's name; the values: {names}"
            )
        for value in self.values:
            try:
                load_recipe(self.recipe, self.overrides + value.overrides)
            except RecipeError as err:
                raise SweepError(f"{self.source}: value {value.name!r}: {err}") from None

    def runs(self, root: Path) -> list[Run]:
        """Every (value, seed) run, each with its folder under `root/runs/`: seed 0 of every value first, then
        seed 1, ..., so that a sweep stopped part-way has compared every value on the same seeds."""
        return [Run.plan(self, value, seed, root) for seed in range(self.seeds) for value in self.values]


@dataclass
class Run:
    value: SweepValue
    seed: int
    overrides: list[str]
    """Everything passed to train.py after the recipe (the sweep's, the value's, the seed)."""
    folder: Path
    budget_minutes: float
    recipe: Path
    launch: str = ""

    @classmethod
    def plan(cls, sweep: Sweep, value: SweepValue, seed: int, root: Path) -> Run:
        overrides = [*sweep.overrides, *value.overrides, f"trainer.seed={seed}"]
        # The recipe as written with the overrides applied: what decides the run, whatever defaults the code
        # fills in (a new recipe section in a later version leaves finished runs finished).
        written = _without_nulls(read_recipe_data(sweep.recipe, overrides))
        written.get("trainer", {}).pop("output_dir", None)
        decided = {"recipe": written, "budget": sweep.budget_minutes}
        if sweep.launch:  # (a run in one process keeps the identity it had before launches could differ)
            decided["launch"] = sweep.launch
        identity = json.dumps(decided, sort_keys=True, default=str)
        digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
        existing = sorted((root / "runs").glob(f"*-{digest}"))
        what = "-".join(o.replace('"', "") for o in value.overrides) or "as-is"
        slug = re.sub(r"[^\w.=-]+", "_", f"{sweep.recipe.stem}-{what}")[:80] + f"-seed{seed}"
        folder = existing[0] if existing else root / "runs" / f"{slug}-{digest}"
        return cls(value, seed, overrides, folder, sweep.budget_minutes, sweep.recipe, sweep.launch)

    @property
    def finished(self) -> bool:
        return (self.folder / "summary.json").is_file() and (self.folder / "eval_after.json").is_file()

    def command(self) -> list[str]:
        launcher = shlex.split(self.launch) if self.launch else [sys.executable]
        return [
            *launcher,
            str(REPO / "scripts" / "train.py"),
            "--config",
            str(self.recipe),
            "--no-resume",
            "--time-limit",
            f"{self.budget_minutes:g}",
            *self.overrides,
            f"trainer.output_dir={self.folder}",
        ]

    def execute(self, log: Callable[[str], None] = print) -> None:
        """Train and evaluate; the console output also goes to `<folder>.log`. An unfinished earlier attempt
        is moved aside, never deleted."""
        if self.folder.exists():
            aside = self.folder.with_name(f"{self.folder.name}.unfinished-{time.strftime('%Y%m%d-%H%M%S')}")
            shutil.move(str(self.folder), aside)
            log(f"moved an unfinished earlier attempt to {aside}")
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        with open(self.folder.with_name(self.folder.name + ".log"), "w") as out:
            process = subprocess.Popen(
                self.command(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            assert process.stdout is not None
            for line in process.stdout:
                out.write(line)
                sys.stdout.write(line)
            if process.wait() != 0:
                raise SweepError(f"run {self.folder} failed (exit {process.returncode}); see {out.name}")


def _without_nulls(data: Any) -> Any:
    """Mappings without their null values: `warmup: null` is the recipe without a warm-up, the same run.

    >>> _without_nulls({"warmup": None, "trainer": {"seed": 0, "beta": None}})
    {'trainer': {'seed': 0}}
    """
    if isinstance(data, dict):
        return {key: _without_nulls(value) for key, value in data.items() if value is not None}
    return data


def measure(folder: Path) -> dict[str, Any]:
    """The figures of one finished run folder: steps, wall time, held-out accuracy (and its per-problem
    verdicts), zero-gradient and zero-variance shares, completion length, completions generated.

    Counts come from what train.py already summed into summary.json (its `sampling` and `after`); the
    per-step means and levels from log_history.json."""
    summary = json.loads((folder / "summary.json").read_text())
    sampling, after = summary["sampling"], summary["after"]
    steps = [h for h in json.loads((folder / "log_history.json").read_text()) if "grad_norm" in h]
    trainer = yaml.safe_load((folder / "resolved_recipe.yaml").read_text()).get("trainer", {})

    def average(key: str) -> float | None:
        values = [h[key] for h in steps if key in h]
        return sum(values) / len(values) if values else None

    if "groups_generated" in sampling:  # dynamic sampling: extra rounds generate more
        generated = sampling["groups_generated"] * trainer.get("num_generations", 8)
    else:
        per_step = trainer.get("per_device_train_batch_size", 8) * trainer.get(
            "gradient_accumulation_steps", 1
        )
        world_size = json.loads((folder / "run_info.json").read_text()).get("world_size", 1)
        generated = sampling["steps"] * per_step * world_size
    before, base = summary.get("before") or {}, summary.get("base") or {}
    # train.py's train_seconds includes the evaluations before training (of the base model too, in a run with a
    # warm-up; of the teacher in a distillation run), which the budget does not count, and leaves out the
    # supervised warm-up, which it counts.
    evaluations = [before, base, summary.get("teacher") or {}]
    grpo_seconds = summary["train_seconds"] - sum(e.get("seconds") or 0 for e in evaluations)
    curve = summary.get("held_out_curve") or []
    if curve:  # the training clock's own count, which leaves out the evaluations during training too
        grpo_seconds = curve[-1]["minutes"] * 60
    return {
        "trainer": summary.get("trainer", "grpo"),
        "steps": summary["global_step"],
        "train_seconds": grpo_seconds + summary.get("warmup_seconds", 0),
        "grpo_seconds": grpo_seconds,
        "accuracy_before": before.get("accuracy"),
        "accuracy_after": after["accuracy"],
        "correct": after["correct_by_problem"],
        # GRPO's starting point (after the warm-up, if any), problem by problem: GRPO's own change is paired on it.
        "correct_before": before.get("correct_by_problem"),
        "zero_gradient_steps": sampling["zero_gradient_steps"] / max(1, sampling["steps"]),
        # TRL's frac_reward_zero_std is the share of groups with equal rewards, except under
        # scale_rewards: batch, where it says whether the whole batch's rewards were equal.
        "zero_variance_groups": None
        if trainer.get("scale_rewards") == "batch"
        else average("frac_reward_zero_std"),
        "mean_completion_length": average("completions/mean_length"),
        "completions_generated": generated,
        "reward": [h.get("reward") for h in steps],
        # Held-out accuracy against minutes of training (runs from before the curve existed have none).
        "curve": curve,
        # The level the last step's prompts were drawn at (summary.json's is where the controller went after).
        "final_level": next(
            (h["curriculum/level"] for h in reversed(steps) if "curriculum/level" in h), None
        ),
    }


def pooled_paired_difference(
    new: dict[int, Sequence[float]], reference: dict[int, Sequence[float]]
) -> dict[str, float]:
    """The paired difference `new - reference` on the same problems, pooled over the seeds both have.

    Each problem's verdict is first averaged over seeds (so a problem counts once, whatever the number of
    seeds); the interval is then `paired_difference`'s, over problems.
    """
    seeds = sorted(set(new) & set(reference))
    if not seeds:
        raise ValueError("no seed in common")
    mean_new = [sum(col) / len(seeds) for col in zip(*(new[s] for s in seeds), strict=True)]
    mean_ref = [sum(col) / len(seeds) for col in zip(*(reference[s] for s in seeds), strict=True)]
    return paired_difference(mean_new, mean_ref) | {"pairs": len(mean_new), "seeds": len(seeds)}


def summarize(sweep: Sweep, results: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """Per value (over its finished seeds): means of the run figures, pooled accuracy with its Wilson
    interval, and the pooled paired difference against the first value, with whether its interval excludes 0."""
    reference = sweep.values[0].name
    rows = []
    for value in sweep.values:
        runs = results.get(value.name, {})
        if not runs:
            rows.append({"value": value.name, "runs": 0})
            continue

        def mean_of(key: str, runs=runs) -> float | None:
            values = [r[key] for r in runs.values() if r.get(key) is not None]
            return sum(values) / len(values) if values else None

        correct = sum(sum(r["correct"]) for r in runs.values())
        total = sum(len(r["correct"]) for r in runs.values())
        low, high = wilson_interval(correct, total)
        row = {
            "value": value.name,
            "trainer": next(iter(runs.values())).get("trainer", "grpo"),
            "overrides": value.overrides,
            "runs": len(runs),
            "seeds": sorted(runs),
            "accuracy": correct / total,
            "interval": [round(low, 4), round(high, 4)],
            **{
                key: mean_of(key)
                for key in (
                    "steps",
                    "train_seconds",
                    "grpo_seconds",
                    "accuracy_before",
                    "zero_gradient_steps",
                    "zero_variance_groups",
                    "mean_completion_length",
                    "completions_generated",
                    "final_level",
                )
            },
        }
        if all(r.get("correct_before") for r in runs.values()):
            row["grpo_change"] = pooled_paired_difference(
                {s: r["correct"] for s, r in runs.items()},
                {s: r["correct_before"] for s, r in runs.items()},
            )
        if value.name != reference and results.get(reference):
            paired = pooled_paired_difference(
                {s: r["correct"] for s, r in runs.items()},
                {s: r["correct"] for s, r in results[reference].items()},
            )
            row["paired_difference"] = paired
            row["verdict"] = "real" if paired["low"] > 0 or paired["high"] < 0 else "noise"
        rows.append(row)
    reached = _minutes_to_reach(sweep.reach, rows, results)
    return {
        "sweep": sweep.name,
        "recipe": str(sweep.recipe),
        "budget_minutes": sweep.budget_minutes,
        "launch": sweep.launch,
        "description": sweep.description,
        "seeds": sweep.seeds,
        "overrides": sweep.overrides,
        "reference": reference,
        "rows": rows,
        **({"reach": reached} if reached else {}),
    }


def _is_number(value: Any) -> bool:
    """An int or a float as YAML reads them (true and false are not numbers).

    >>> _is_number(4), _is_number(0.5), _is_number(True), _is_number("4")
    (True, True, False, False)
    """
    return isinstance(value, int | float) and not isinstance(value, bool)


def _reach(raw: Any, names: Sequence[str] = ()) -> str | float | None:
    """A sweep file's `reach`: a value's name where one is spelled so, else a number is an accuracy, and
    anything else a name.

    >>> _reach(0.818), _reach(1), _reach("GRPO"), _reach(None), _reach(0.5, names=["0.5", "1"])
    (0.818, 1.0, 'GRPO', None, '0.5')
    """
    if raw is None:
        return None
    if str(raw) in names:
        return str(raw)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    return str(raw)


def _minutes_to_reach(
    reach: str | float | None, rows: list[dict[str, Any]], results: dict[str, dict[int, dict[str, Any]]]
) -> dict[str, Any] | None:
    """The target accuracy (`reach` itself where it is a number, else that value's pooled final accuracy),
    and for each value the minutes of training each of its seeds took to first stand at or above it (None for
    a seed whose curve never does); sets `minutes_to_reach` on each row. None without `reach` or without runs
    of the value it names."""
    from .report import minutes_to_reach

    if isinstance(reach, float):
        target, reach = reach, None
    else:
        target = next((row["accuracy"] for row in rows if row["value"] == reach and row["runs"]), None)
    if target is None:
        return None
    for row in rows:
        if row["runs"]:
            runs = results[row["value"]]
            row["minutes_to_reach"] = {
                seed: minutes_to_reach(runs[seed].get("curve") or [], target) for seed in sorted(runs)
            }
    return {"value": reach, "accuracy": target}


def _percent(value: float | None, signed: bool = False) -> str:
    return "—" if value is None else f"{value:+.1%}" if signed else f"{value:.1%}"


def _change(paired: dict[str, float] | None) -> str:
    """A pooled paired change with its interval, or a dash.

    >>> _change({"difference": 0.12, "low": 0.05, "high": 0.19}), _change(None)
    ('+12.0% [+5.0%, +19.0%]', '—')
    """
    if not paired:
        return "—"
    return f"{paired['difference']:+.1%} [{paired['low']:+.1%}, {paired['high']:+.1%}]"


def _grpo_seconds(row: dict[str, Any]) -> float:
    """Seconds of GRPO steps: training time less a warm-up (runs measured before the warm-up existed have
    only their training time, which was all GRPO)."""
    return row["train_seconds"] if row.get("grpo_seconds") is None else row["grpo_seconds"]


def markdown(table: dict[str, Any]) -> str:
    """The sweep's table: one row per value."""
    header = [
        "value",
        "runs",
        "steps",
        "training min",
        "s/step",
        "held-out accuracy [95 %]",
        f"vs {table['reference']} [paired 95 %]",
        "GRPO's own change [paired 95 %]"
        if all(row.get("trainer", "grpo") == "grpo" for row in table["rows"])
        else "own change in training, GRPO or distillation [paired 95 %]",
        "zero-gradient steps",
        "all-equal groups",
        "mean length",
    ]
    reach = table.get("reach")
    if reach:
        whose = f"{reach['value']}'s " if reach.get("value") else ""
        header.append(f"minutes to reach {whose}{reach['accuracy']:.1%} (per seed)")
    lines = [
        f"Sweep `{table['sweep']}` on `{table['recipe']}`: at most {table['budget_minutes']:g} min of training per run, "
        f"{table['seeds']} seed(s) per value"
        + (f", with {' '.join(table['overrides'])}" if table["overrides"] else "")
        + (f", launched with `{table['launch']}`" if table.get("launch") else "")
        + (f". {table['description']}" if table.get("description") else ""),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for row in table["rows"]:
        if not row["runs"]:
            lines.append(f"| {row['value']} | 0 |" + " — |" * (len(header) - 2))
            continue
        paired = row.get("paired_difference")
        difference = f"{_change(paired)} {row['verdict']}" if paired else "reference"
        cells = [
            row["value"],
            str(row["runs"]),
            f"{row['steps']:.0f}",
            f"{row['train_seconds'] / 60:.1f}",
            f"{_grpo_seconds(row) / max(1, row['steps']):.1f}",
            f"{row['accuracy']:.1%} [{row['interval'][0]:.1%}, {row['interval'][1]:.1%}]",
            difference,
            _change(row.get("grpo_change")),
            _percent(row["zero_gradient_steps"]) if row.get("trainer", "grpo") == "grpo" else "—",
            _percent(row["zero_variance_groups"]),
            "—" if row["mean_completion_length"] is None else f"{row['mean_completion_length']:.1f}",
        ]
        if reach:
            cells.append(_reach_cell(row.get("minutes_to_reach") or {}))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _reach_cell(minutes: dict[int, float | None]) -> str:
    """The mean over the seeds that got there, and each seed's minutes.

    >>> _reach_cell({0: 4.5, 1: None, 2: 6.1})
    '5.3 (4.5, not reached, 6.1)'
    >>> _reach_cell({0: None})
    'not reached'
    """
    got = [m for m in minutes.values() if m is not None]
    each = ", ".join("not reached" if m is None else f"{m:.1f}" for m in minutes.values())
    if not got:
        return "not reached"
    return f"{sum(got) / len(got):.1f} ({each})" if len(minutes) > 1 else f"{got[0]:.1f}"


def plot(table: dict[str, Any], results: dict[str, dict[int, dict[str, Any]]], path: Path) -> Path:
    """Held-out accuracy per value with its interval, the training reward per step of each value, and, where
    runs evaluated during training, each run's held-out accuracy against minutes of training."""
    from .report import _pyplot, moving_average, smoothing_window

    plt = _pyplot()
    rows = [row for row in table["rows"] if row["runs"]]
    held_out_curves = any(
        len(r.get("curve") or []) > 2 for by_seed in results.values() for r in by_seed.values()
    )
    figure, axes = plt.subplots(1, 3 if held_out_curves else 2, figsize=(16.5 if held_out_curves else 11, 4))
    left, right = axes[0], axes[1]
    names = [row["value"] for row in rows]
    accuracy = [row["accuracy"] for row in rows]
    errors = [
        [a - row["interval"][0] for a, row in zip(accuracy, rows, strict=True)],
        [row["interval"][1] - a for a, row in zip(accuracy, rows, strict=True)],
    ]
    left.bar(names, accuracy, yerr=errors, capsize=4, color="tab:blue")
    left.set_ylabel("held-out accuracy (greedy), 95 % interval")
    left.set_ylim(0, 1)
    left.tick_params(axis="x", rotation=20)
    for row in rows:
        curves = [r["reward"] for r in results[row["value"]].values()]
        length = min(len(c) for c in curves)
        if length == 0:
            continue
        mean = [sum(c[i] or 0 for c in curves) / len(curves) for i in range(length)]
        right.plot(range(1, length + 1), moving_average(mean, smoothing_window(length)), label=row["value"])
    right.set_xlabel("optimizer step")
    right.set_ylabel("training reward (moving average)")
    right.legend(fontsize=8)
    if held_out_curves:
        ax = axes[2]
        for index, row in enumerate(rows):
            for seed, run in enumerate(results[row["value"]].values()):
                curve = run.get("curve") or []
                ax.plot(
                    [p["minutes"] for p in curve],
                    [p["accuracy"] for p in curve],
                    color=f"C{index}",
                    marker=".",
                    alpha=0.8,
                    label=row["value"] if seed == 0 else None,
                )
        if table.get("reach"):
            ax.axhline(table["reach"]["accuracy"], color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("minutes of training (evaluations not counted)")
        ax.set_ylabel("held-out accuracy (greedy), each run")
        ax.legend(fontsize=8)
    figure.suptitle(f"{table['sweep']}: at most {table['budget_minutes']:g} min of training per run")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def run_sweep(
    sweep: Sweep, root: Path = DEFAULT_ROOT, report_only: bool = False, log=print
) -> dict[str, Any]:
    """Run what is not finished yet (one run at a time), then write `<root>/<name>/sweep.{json,md,png}`."""
    root = Path(root)
    runs = sweep.runs(root)
    for i, run in enumerate(runs, 1):
        if run.finished:
            log(f"[{i}/{len(runs)}] {run.value.name}, seed {run.seed}: finished earlier ({run.folder})")
        elif not report_only:
            log(f"\n[{i}/{len(runs)}] {run.value.name}, seed {run.seed}: {shlex.join(run.command())}")
            run.execute(log)
    results: dict[str, dict[int, dict[str, Any]]] = {}
    for run in runs:
        if run.finished:
            results.setdefault(run.value.name, {})[run.seed] = measure(run.folder) | {
                "folder": str(run.folder)
            }
    table = summarize(sweep, results)
    table["runs"] = {
        name: {
            seed: {k: v for k, v in r.items() if k not in ("correct", "reward")}
            for seed, r in by_seed.items()
        }
        for name, by_seed in results.items()
    }
    out = root / sweep.name
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(table, indent=2) + "\n")
    text = markdown(table)
    (out / "sweep.md").write_text(text)
    picture = plot(table, results, out / "sweep.png") if results else None
    log("\n" + text)
    log(f"written: {out / 'sweep.json'}, {out / 'sweep.md'}" + (f", {picture}" if picture else ""))
    return table
