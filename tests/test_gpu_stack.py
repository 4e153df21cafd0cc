"""The `gpu` extra against TRL's supported vLLM range and pip's resolver.

vLLM pins one torch build (and bounds transformers), so a loose `vllm` requirement lets pip pick a release that
moves torch or transformers under the project, or one TRL warns about. The fast test checks the specifier in
pyproject.toml against the range TRL itself declares; the slow one asks pip's resolver (dry run, network to the
package index) what `pip install -e ".[gpu]"` would do in this environment.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli")

ROOT = Path(__file__).resolve().parents[1]
# The packages the extra must leave alone: the project's own pins, and the torch build `make setup` chose.
UNTOUCHED = ("torch", "transformers", "trl")
# What a failed connection to the index looks like in pip's output (as opposed to a resolution failure).
NETWORK_ERRORS = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Max retries exceeded|ConnectTimeout"
    r"|ReadTimeout|Read timed out|Temporary failure in name resolution|Name or service not known"
    r"|Network is unreachable|Connection refused|ProxyError|SSLError|Could not fetch URL"
    r"|No route to host|getaddrinfo failed|NameResolutionError",
)


def trl_vllm_range() -> tuple[Version, Version]:
    """The inclusive (min, max) vLLM range of the installed TRL, read from `is_vllm_available`'s source.

    Read as text rather than imported, so the test follows a TRL upgrade without importing TRL (or vLLM).
    """
    spec = importlib.util.find_spec("trl")
    assert spec is not None and spec.origin, "TRL is not installed"
    source = (Path(spec.origin).parent / "import_utils.py").read_text(encoding="utf-8")
    function = re.search(r"^def is_vllm_available\(.*?(?=^\S)", source, re.M | re.S)
    assert function, "trl/import_utils.py has no is_vllm_available any more: update this test"
    bounds = re.search(
        r'Version\(\s*"([^"]+)"\s*\)\s*<=\s*[\w.()]+\s*<=\s*Version\(\s*"([^"]+)"\s*\)', function.group(0)
    )
    assert bounds, "is_vllm_available no longer checks `Version(min) <= v <= Version(max)`: update this test"
    return Version(bounds.group(1)), Version(bounds.group(2))


def trl_supports(version: Version) -> bool:
    low, high = trl_vllm_range()
    return low <= Version(version.base_version) <= high  # TRL drops the local segment (+cu129) the same way


def gpu_extra() -> list[Requirement]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [Requirement(r) for r in pyproject["project"]["optional-dependencies"]["gpu"]]


def bounds(specifier: SpecifierSet) -> tuple[list[Version], list[Version]]:
    """The lower and upper bounds a specifier set puts on versions (inclusive or not)."""
    lower, upper = [], []
    for spec in specifier:
        op, text = spec.operator, spec.version
        if op in ("==", "===") and text.endswith(".*"):
            release = Version(text[:-2]).release
            lower.append(Version(".".join(map(str, release))))
            upper.append(Version(".".join(map(str, (*release[:-1], release[-1] + 1)))))
        elif op in ("==", "==="):
            lower.append(Version(text))
            upper.append(Version(text))
        elif op == "~=":
            release = Version(text).release
            lower.append(Version(text))
            upper.append(Version(".".join(map(str, (*release[:-2], release[-2] + 1)))))
        elif op in (">=", ">"):
            lower.append(Version(text))
        elif op in ("<=", "<"):
            upper.append(Version(text))
    return lower, upper


def test_gpu_extra_vllm_range_lies_inside_trls():
    """The `vllm` requirement of the `gpu` extra admits only releases TRL supports."""
    low, high = trl_vllm_range()
    (vllm,) = [r for r in gpu_extra() if canonicalize_name(r.name) == "vllm"]
    lower, upper = bounds(vllm.specifier)
    assert lower, f"gpu extra {vllm} has no lower bound; TRL supports vLLM {low} to {high}"
    assert upper, f"gpu extra {vllm} has no upper bound; TRL supports vLLM {low} to {high}"
    # The tightest bounds win. TRL's maximum is inclusive, so `<X` and `<=X` are both fine up to X == max.
    assert max(lower) >= low, f"gpu extra {vllm} admits vLLM below TRL's minimum {low}"
    assert min(upper) <= high, f"gpu extra {vllm} admits vLLM above TRL's maximum {high}"


def pip(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """The environment's own pip, with the machine-wide constraint file (if any) lifted.

    An empty PIP_CONSTRAINT is ignored by pip (empty settings fall back to the config files), so it points at
    an empty file instead: the resolution is the one a user's machine without such a cap would get.
    """
    env = {
        **os.environ,
        "PIP_CONSTRAINT": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def installed(name: str) -> Version | None:
    try:
        return Version(importlib.metadata.version(name))
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.slow
def test_pip_resolves_gpu_extra_inside_trls_range_without_moving_the_stack(tmp_path):
    """`pip install -e ".[gpu]"` would pick a TRL-supported vLLM and keep torch, transformers and TRL."""
    probe = pip("index", "versions", "vllm", "--retries", "1", "--timeout", "15", timeout=120)
    if probe.returncode != 0 and NETWORK_ERRORS.search(probe.stdout + probe.stderr):
        pytest.skip(f"the package index cannot be reached: {(probe.stderr or probe.stdout).strip()[-300:]}")

    report_path = tmp_path / "report.json"
    result = pip(
        "install", "--dry-run", "--quiet", "--report", str(report_path), "-e", ".[gpu]", timeout=1800
    )
    assert result.returncode == 0, (
        f"pip cannot resolve .[gpu]:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    report = json.loads(report_path.read_text(encoding="utf-8"))
    plan = {
        canonicalize_name(item["metadata"]["name"]): Version(item["metadata"]["version"])
        for item in report["install"]
    }

    vllm = plan.get("vllm") or installed("vllm")
    deepspeed = plan.get("deepspeed") or installed("deepspeed")
    resolved = (
        f"resolved vllm {vllm} ({'to install' if 'vllm' in plan else 'already installed'}), "
        f"deepspeed {deepspeed} ({'to install' if 'deepspeed' in plan else 'already installed'})"
    )
    print(resolved)
    low, high = trl_vllm_range()
    problems = []
    if vllm is None:
        problems.append("no vllm at all")
    elif not trl_supports(vllm):
        problems.append(f"vllm {vllm} is outside TRL's supported {low} to {high}")
    problems += [
        f"{name} {installed(name)} would be replaced by {plan[name]}"
        for name in UNTOUCHED
        if name in plan and plan[name] != installed(name)
    ]
    assert not problems, f"pip install -e '.[gpu]' here: {'; '.join(problems)} ({resolved})"
