"""The layering rules hold: arrows point inward, policy is pure, the webhook never imports the compiler, no cycles."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_import_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports, "import-linter is a test dependency"
    result = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_importing_the_policy_core_pulls_in_no_shell_library() -> None:
    probe = (
        "import sys, policy.load, policy.offers, policy.checks, policy.resolve\n"
        "print([m for m in ('flask', 'kubernetes', 'cryptography', 'prometheus_client', 'compiler', 'webhook',"
        " 'cli', 'cluster') if m in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
