"""gpupolicy validate and schema from the outside: exit codes, output formats, usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import COMMANDS, main

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples" / "clusters").glob("*/cluster.yaml"))
BAD = ROOT / "tests" / "fixtures" / "specs" / "bad"
TYPO = BAD / "unknown-gpu-model" / "l20-typo.yaml"


def run(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_bundled_examples_validate_with_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run("validate", *map(str, EXAMPLES), capsys=capsys)
    assert code == 0
    assert out.endswith(f"{len(EXAMPLES)} file(s) checked: 0 error(s), 0 warning(s)\n")


def test_json_output_follows_the_documented_shape(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run("validate", "--output", "json", str(TYPO), capsys=capsys)
    assert code == 1
    report = json.loads(out)
    assert report["version"] == 1
    assert report["summary"] == {"files": 1, "errors": 1, "warnings": 0, "exitCode": 1}
    assert report["diagnostics"] == [
        {
            "code": "unknown-gpu-model",
            "severity": "error",
            "message": "GPU model 'NVIDIA-L2O' is not in the catalog",
            "hint": "did you mean 'NVIDIA-L20'? (or state gpu.memory for a model the catalog lacks; MIG is then "
            "unavailable)",
            "path": "spec.nodeClasses[0].gpu.model",
            "file": str(TYPO),
            "line": 10,
            "column": 20,
            "fix": None,
        }
    ]


def test_json_output_is_documented() -> None:
    doc = (ROOT / "docs" / "validate-output.md").read_text()
    for key in ("version", "summary", "diagnostics", "exitCode", "code", "severity", "hint", "path", "line", "column",
                "fix"):
        assert f"`{key}`" in doc


def test_github_output_is_one_workflow_command_per_finding(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run("validate", "--output", "github", str(TYPO), capsys=capsys)
    assert code == 1
    assert out == (
        f"::error file={TYPO},line=10,col=20,title=unknown-gpu-model::GPU model 'NVIDIA-L2O' is not in the "
        "catalog (did you mean 'NVIDIA-L20'? (or state gpu.memory for a model the catalog lacks; MIG is then "
        "unavailable))\n"
    )


def test_strict_turns_warnings_into_a_failing_exit(capsys: pytest.CaptureFixture[str]) -> None:
    warning_only = BAD / "tenant-overlap" / "prod-and-everyone-with-tier.yaml"
    assert run("validate", str(warning_only), capsys=capsys)[0] == 0
    assert run("validate", "--strict", str(warning_only), capsys=capsys)[0] == 1


def test_one_bad_file_never_hides_the_findings_of_the_others(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run("validate", str(TYPO), "does-not-exist.yaml", str(EXAMPLES[0]), capsys=capsys)
    assert code == 2
    assert "unknown-gpu-model" in out and "does-not-exist.yaml does not exist" in out


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["validate"], ["validate", "--output", "xml", "x.yaml"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(*argv, capsys=capsys)[0] == 2


def test_schema_prints_the_cluster_policy_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run("schema", capsys=capsys)
    assert code == 0 and json.loads(out)["$id"].endswith("cluster-policy.schema.json")


HEAVY = ("pydantic", "yaml", "flask", "kubernetes", "cryptography", "jsonschema", "prometheus_client")


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_works_for_every_command_without_importing_heavy_libraries(command: str | None) -> None:
    # Lazy loading can hide import errors (click's docs warn of it): --help imports each command module.
    argv = ["--help"] if command is None else [command, "--help"]
    probe = (
        "import sys; from cli.main import main\n"
        f"code = main({argv!r})\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(code, heavy)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "0 []"
