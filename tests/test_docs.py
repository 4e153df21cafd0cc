"""The documentation stays true to the tree.

README.md and docs/*.md may name only `make` targets the Makefile has, recipes in recipes/, and configs,
scripts, modules and tests that exist; their links between pages resolve, `#anchors` included (GitHub's
heading slugs); docs/architecture.md's package tree lists only what is there; and every "Measured <date>
at <commit>" line names a commit of that date.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
from support import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ARCHITECTURE = REPO / "docs" / "architecture.md"

# The reader's own recipes in the examples (the walk-through creates recipes/units.yaml and its data).
EXAMPLE_RECIPES = {"units", "mine", "yours", "mytask", "x"}
EXAMPLE_PATHS = ("recipes/data/mine",)
# What docs/architecture.md may name before it exists (its package tree marks them "being added" or
# "planned"); every other page names only what is there.
PLANNED = ("sandbox/", "grpo_recipes/agents/")
PLANNED_MARKS = ("(being added)", "(planned)")

FENCE = re.compile(r"^ *```.*?^ *```", re.DOTALL | re.MULTILINE)
CODE_SPAN = re.compile(r"`+([^`]+)`+")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#* *$", re.MULTILINE)
MAKE = re.compile(r"\bmake +([a-z][\w-]*)")
RECIPE_ARG = re.compile(r"\bRECIPE=([A-Za-z0-9][\w.-]*)")
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:grpo_recipes|rewards|sandbox|scripts|configs|recipes|tests|docs)/[\w./-]*)"
)
TEST_FILE = re.compile(r"(?<![\w/.-])(test_\w+\.py)\b")
PROVENANCE = re.compile(r"\b(?:Measured|measured|Resolved) (\d{4}-\d\d-\d\d) at `([0-9a-f]{7,40})`")


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


@cache
def text(page: Path) -> str:
    return page.read_text()


def code(page: Path) -> str:
    """The page's fenced blocks and inline code spans, where commands and paths are written."""
    body = text(page)
    blocks = [m.group(0) for m in FENCE.finditer(body)]
    spans = [" ".join(m.group(1).split()) for m in CODE_SPAN.finditer(FENCE.sub("", body))]
    return "\n".join(spans + blocks)


def prose(page: Path) -> str:
    """The page without fenced blocks or code spans: where links and headings are."""
    return CODE_SPAN.sub("code", FENCE.sub("", text(page)))


@cache
def make_targets() -> frozenset[str]:
    """The Makefile's rule targets (`name: ...` lines; variable assignments are not rules)."""
    targets = set()
    for line in (REPO / "Makefile").read_text().splitlines():
        rule = re.match(r"^([\w.-]+(?:[ \t]+[\w.-]+)*)[ \t]*:(?!=)", line)
        if rule:
            targets.update(rule.group(1).split())
    return frozenset(targets)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (not - or _), spaces to hyphens."""
    heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    result = set()
    for match in HEADING.finditer(FENCE.sub("", text(page))):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return frozenset(result)


def exists(path: str) -> bool:
    """A file, or with a trailing slash a folder, of the repository."""
    return (REPO / path).is_dir() if path.endswith("/") else (REPO / path).exists()


def allowed_missing(page: Path, path: str) -> bool:
    if any(path.startswith(example) for example in EXAMPLE_PATHS):
        return True
    if re.fullmatch(r"recipes/([\w.-]+)\.yaml", path) and Path(path).stem in EXAMPLE_RECIPES:
        return True
    return page == ARCHITECTURE and path.startswith(PLANNED)


def test_the_pages_are_there():
    assert {page.name for page in PAGES} >= {
        "README.md",
        "recipes.md",
        "new-task.md",
        "tasks.md",
        "rewards.md",
        "evaluation.md",
        "distributed.md",
        "benchmarks.md",
        "troubleshooting.md",
        "architecture.md",
    }


def test_slugs_follow_github():
    assert slug("Prove a recipe distributed on a CPU first: `make smoke`") == (
        "prove-a-recipe-distributed-on-a-cpu-first-make-smoke"
    )
    assert slug("vLLM: colocate or server") == "vllm-colocate-or-server"
    assert slug("report.md") == "reportmd"
    assert slug("What `make_thing` does") == "what-make_thing-does"


def test_makefile_targets_are_read():
    assert {"train", "test", "test-smoke", "check", "bench-sampling", "clean"} <= make_targets()
    assert not {"PYTHON", "VLLM_CPU_VERSION", "MODEL"} & make_targets()


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_make_target_named_exists(page):
    named = set(MAKE.findall(code(page)))
    missing = sorted(named - make_targets())
    assert not missing, f"{page_id(page)} names make targets the Makefile lacks: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_recipe_named_exists(page):
    named = set(RECIPE_ARG.findall(text(page)))
    named |= {m.group(1) for m in re.finditer(r"(?<![\w./-])recipes/([\w.-]+)\.yaml", text(page))}
    missing = sorted(n for n in named - EXAMPLE_RECIPES if not (REPO / "recipes" / f"{n}.yaml").is_file())
    assert not missing, f"{page_id(page)} names recipes that recipes/ lacks: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_path_named_exists(page):
    """configs/, scripts/, grpo_recipes/, rewards/, tests/ ... paths, and bare test file names."""
    missing = []
    for match in REPO_PATH.finditer(text(page)):
        path = match.group(1).rstrip(".")
        if not exists(path) and not allowed_missing(page, path):
            missing.append(path)
    for name in TEST_FILE.findall(text(page)):
        if not any((REPO / "tests").rglob(name)):
            missing.append(f"tests/**/{name}")
    assert not missing, f"{page_id(page)} names paths that do not exist: {sorted(set(missing))}"


def package_tree() -> list[tuple[str, str]]:
    """(path, description) for each entry of docs/architecture.md's package tree."""
    section = text(ARCHITECTURE).split("## Package tree", 1)[1]
    block = FENCE.search(section)
    assert block, "docs/architecture.md's package tree has no code block"
    entries, stack = [], []
    for line in block.group(0).splitlines()[1:-1]:
        entry = re.match(r"^( *)([\w.-]+/|[\w.-]+\.(?:py|sbatch|yaml))(?: +(.*))?$", line)
        if not entry:
            continue  # a description carried onto the next line
        depth = len(entry.group(1)) // 2
        stack[depth:] = [entry.group(2).rstrip("/")]
        entries.append(
            ("/".join(stack) + ("/" if entry.group(2).endswith("/") else ""), entry.group(3) or "")
        )
    return entries


def test_the_package_tree_lists_what_is_there():
    entries = package_tree()
    paths = [path for path, _ in entries]
    assert {"grpo_recipes/", "grpo_recipes/recipe.py", "scripts/slurm/train.sbatch"} <= set(paths)
    missing = [
        path
        for path, about in entries
        if not exists(path) and not (path.startswith(PLANNED) and about.endswith(PLANNED_MARKS))
    ]
    assert not missing, f"docs/architecture.md's package tree lists what does not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_link_resolves(page):
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and (file.suffix != ".md" or fragment not in anchors(file)):
            broken.append(f"{target} (no heading #{fragment} in {file.name})")
    assert not broken, f"{page_id(page)} has broken links: {broken}"


def git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_measured_figures_name_a_commit_of_that_date(page):
    dated = PROVENANCE.findall(text(page))
    if not dated:
        return
    if git("rev-parse", "--verify", "HEAD") is None or git("rev-parse", "--is-shallow-repository") != "false":
        pytest.skip("not a full git clone: the commits cannot be looked up")
    wrong = []
    for date, commit in dated:
        found = git("show", "-s", "--format=%ad", "--date=short", f"{commit}^{{commit}}")
        if found != date:
            wrong.append(f"{commit} {date} (git: {found or 'no such commit'})")
    assert not wrong, f"{page_id(page)}: provenance names the wrong commit or date: {wrong}"
