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
        "import sys, policy.load, policy.resolved.offers, policy.checks, policy.resolved.resolve\n"
        "print([m for m in ('flask', 'kubernetes', 'cryptography', 'prometheus_client', 'compiler', 'webhook',"
        " 'cli', 'cluster') if m in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# --- packaging: the package list, the image and the package data agree with the source tree --------------------

_NOT_SHIPPED = {"tests", "bench", "scripts", "build", "docs", "examples", "schemas"}


def _source_packages() -> set[str]:
    found = set()
    for init in ROOT.glob("*/**/__init__.py"):
        parts = init.parent.relative_to(ROOT).parts
        if parts[0] not in _NOT_SHIPPED and not parts[0].startswith("."):
            found.add(".".join(parts))
    return found


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_package_of_the_source_tree_is_in_pyprojects_package_list() -> None:
    # An editable install finds any package; a wheel only the listed ones, so a missing entry breaks
    # `pip install gpupolicy` and the image while the tests stay green.
    assert set(_pyproject()["tool"]["setuptools"]["packages"]) == _source_packages()


def test_the_image_copies_every_top_level_package() -> None:
    copied = {line.split()[1].rstrip("/") for line in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()
              if line.startswith("COPY ") and "--from" not in line}
    assert {p.split(".")[0] for p in _source_packages()} <= copied


def test_every_data_file_inside_a_package_is_package_data() -> None:
    from fnmatch import fnmatch

    patterns = _pyproject()["tool"]["setuptools"]["package-data"]
    for package in _source_packages():
        folder = ROOT.joinpath(*package.split("."))
        for path in folder.iterdir():
            if path.is_file() and path.suffix not in (".py", ".pyc") and path.name != "README.md":
                assert any(fnmatch(path.name, p) for p in patterns.get(package, [])), path
