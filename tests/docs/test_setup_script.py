"""scripts/setup, the README's first command: silent when it works, and when a step fails, that step's last lines
and where the whole log is.

Run against a stand-in python3 on PATH (no network, seconds instead of minutes): it creates .venv/bin/python as
itself, and its pip prints what the real one printed on a fresh clone, the setuptools block included
(setuptools 84.2.1: setuptools/command/editable_wheel.py, _TopLevelFinder.__exit__; pip 26.3 relays it as a
BuildBackendWarning even with -q).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WARNING = """\
  /tmp/pip-build-env-8enviyyy/overlay/lib/python3.11/site-packages/setuptools/command/editable_wheel.py:354: \
BuildBackendWarning: Editable installation.
  !!
          ********************************************************************************
          Please be careful with folders in your working directory with the same
          name as your package as they may take precedence during imports.
          ********************************************************************************
  !!"""

STAND_IN = f"""\
#!{sys.executable}
import os, shutil, sys
args = sys.argv[1:]
if args[:1] == ["-c"]:
    os.execv({sys.executable!r}, [{sys.executable!r}, *args])
if args[:2] == ["-m", "venv"]:
    os.makedirs(os.path.join(args[2], "bin"), exist_ok=True)
    shutil.copy(__file__, os.path.join(args[2], "bin", "python"))
    sys.exit(0)
if args[:3] == ["-m", "pip", "install"]:
    print("Obtaining file:///repo" if "-e" in args else "Requirement already satisfied: pip")
    if "-e" in args:
        print({WARNING!r}, file=sys.stderr)
        if os.environ.get("STAND_IN_FAIL") == "install":
            print("ERROR: Could not find a version that satisfies the requirement pydantic>=2", file=sys.stderr)
            sys.exit(1)
    print("Successfully installed gpupolicy-0.1.0" if "-e" in args else "")
    sys.exit(0)
sys.exit(f"stand-in python3: unexpected arguments {{args}}")
"""


def setup_in(tmp_path: Path, *args: str, fail: bool = False) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run a copy of scripts/setup in a scratch checkout, with the stand-in python3 first on PATH."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup", checkout / "scripts" / "setup")
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir()
    python = stand_ins / "python3"
    python.write_text(STAND_IN, encoding="utf-8")
    python.chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_ins}{os.pathsep}{os.environ['PATH']}"}
    env.pop("STAND_IN_FAIL", None)
    if fail:
        env["STAND_IN_FAIL"] = "install"
    done = subprocess.run(["bash", str(checkout / "scripts" / "setup"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    return done, checkout


def test_a_set_up_that_works_prints_nothing_and_keeps_what_pip_said_in_its_log(tmp_path: Path) -> None:
    done, checkout = setup_in(tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    log = (checkout / ".venv" / "setup.log").read_text(encoding="utf-8")
    assert "BuildBackendWarning: Editable installation." in log
    assert "+ .venv/bin/python -m pip install -e ." in log and "Successfully installed gpupolicy" in log


@pytest.mark.parametrize("args", [(), ("--test",)])
def test_a_step_that_fails_says_which_shows_its_last_lines_and_where_the_log_is(tmp_path: Path,
                                                                               args: tuple[str, ...]) -> None:
    done, checkout = setup_in(tmp_path, *args, fail=True)
    log = checkout / ".venv" / "setup.log"
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0].startswith("scripts/setup: installing gpupolicy") and lines[0].endswith("failed; its last lines:")
    assert "  ERROR: Could not find a version that satisfies the requirement pydantic>=2" in lines
    assert lines[-1] == f"scripts/setup: the whole log is {log}"
    assert "ERROR: Could not find a version" in log.read_text(encoding="utf-8")


def test_an_older_python_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup", checkout / "scripts" / "setup")
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir()
    old = stand_ins / "python3"
    old.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'Python 3.10.12' && exit 0\nexit 1\n", encoding="utf-8")
    old.chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_ins}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(checkout / "scripts" / "setup")], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr == "scripts/setup: gpupolicy needs Python 3.11 or newer; python3 is Python 3.10.12\n"
    assert not (checkout / ".venv").exists()
