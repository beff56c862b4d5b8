"""Every command the docs show is run, in order, in a scratch copy of the repository; their outputs must hold.

Markers (HTML comments on the line(s) right before a fenced block, invisible when rendered):

- ```` ```bash ```` blocks run, unless marked ``<!-- not-run: reason -->`` (a live cluster, a network fetch);
- ``<!-- exit: N -->``: the block must exit with N (default 0);
- ``<!-- output -->`` before a ``text`` block: every line of it must be a line of the previous run block's
  output (whitespace-normalised, order ignored, ``...`` skipped);
- ``<!-- same-as: PATH -->``: the block is exactly that repository file; ``<!-- excerpt-of: PATH -->``: a
  contiguous part of it.

Each document runs in its own scratch directory (a git repository holding copies of examples/ and schemas/,
with `gpupolicy` on PATH and no kubeconfig), so blocks can write, commit and compile freely.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md"))
BIN = Path(sys.executable).parent
TIMEOUT_SECONDS = 120
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,})(?P<lang>[\w+-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*(?P<name>[a-z-]+)(?::\s*(?P<value>.*?))?\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a document, with the markers right before it."""

    doc: str
    line: int
    """1-based line of the opening fence."""
    lang: str
    text: str
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"docs/{self.doc}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.lang in {"bash", "sh", "shell"} and "not-run" not in self.markers


def parse_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:  # closing fences are consumed with their block, so every fence here opens one
            i += 1
            continue
        markers: dict[str, str] = {}
        j = i - 1
        while j >= 0 and (not lines[j].strip() or _MARKER.match(lines[j].strip())):
            found = _MARKER.match(lines[j].strip())
            if found:
                markers.setdefault(found["name"], (found["value"] or "").strip())
            j -= 1
        end = i + 1
        while end < len(lines) and lines[end].strip() != opening["fence"]:
            end += 1
        indent = len(opening["indent"])
        body = "\n".join(line[indent:] for line in lines[i + 1:end])
        blocks.append(Block(path.name, i + 1, opening["lang"], body + "\n", markers))
        i = end + 1
    return blocks


ALL_BLOCKS = {doc.name: parse_blocks(doc) for doc in DOCS}
RUN_CASES = [(doc, i) for doc, blocks in ALL_BLOCKS.items() for i, b in enumerate(blocks) if b.runnable]
OUTPUT_CASES = [(doc, i) for doc, blocks in ALL_BLOCKS.items() for i, b in enumerate(blocks)
                if "output" in b.markers]
FILE_CASES = [(doc, i) for doc, blocks in ALL_BLOCKS.items() for i, b in enumerate(blocks)
              if "same-as" in b.markers or "excerpt-of" in b.markers]


@dataclass
class Result:
    returncode: int
    output: str


class DocRun:
    """Runs one document's blocks in order in a scratch repository, each at most once."""

    def __init__(self, doc: str, root: Path) -> None:
        self.doc = doc
        self.root = root
        self.blocks = ALL_BLOCKS[doc]
        self.results: dict[int, Result] = {}
        self.next = 0
        self.work = root / "repo"
        for part in ("examples", "schemas"):
            shutil.copytree(REPO / part, self.work / part, ignore=shutil.ignore_patterns("__pycache__"))
        for name in (".home", ".tmp"):
            (root / name).mkdir()
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "KUBE", "PRE_COMMIT"))},
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(root / ".home"),
            "TMPDIR": str(root / ".tmp"),
            "KUBECONFIG": str(root / "no-kubeconfig"),  # a command that needs a cluster fails fast
            "NO_COLOR": "1",
            "GIT_AUTHOR_NAME": "docs", "GIT_AUTHOR_EMAIL": "docs@example.com",
            "GIT_COMMITTER_NAME": "docs", "GIT_COMMITTER_EMAIL": "docs@example.com",
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "scratch copy"]):
            subprocess.run(["git", *args], cwd=self.work, env=self.env, check=True, capture_output=True)

    def result(self, index: int) -> Result:
        """The result of block `index`, running every earlier runnable block first (in document order)."""
        while self.next <= index:
            block = self.blocks[self.next]
            if block.runnable:
                self.results[self.next] = self._run(block)
            self.next += 1
        return self.results[index]

    def _run(self, block: Block) -> Result:
        try:
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=self.work, env=self.env,
                                  capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired as err:
            return Result(-1, f"timed out after {TIMEOUT_SECONDS} s\n{err.stdout or ''}{err.stderr or ''}")
        return Result(done.returncode, done.stdout + done.stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DocRun]:
    made: dict[str, DocRun] = {}

    class Runs(dict[str, DocRun]):
        def __missing__(self, doc: str) -> DocRun:
            made[doc] = DocRun(doc, tmp_path_factory.mktemp(doc.removesuffix(".md")))
            self[doc] = made[doc]
            return made[doc]

    return Runs()


def _missing_command(output: str) -> str:
    found = re.search(r"No module named 'compiler\.commands\.(\w+)'", output)
    return f" (gpupolicy's {found[1]} command does not exist yet)" if found else ""


@pytest.mark.parametrize(("doc", "index"), RUN_CASES, ids=[ALL_BLOCKS[d][i].where for d, i in RUN_CASES])
def test_documented_command_block_runs_with_its_documented_exit_code(
        doc: str, index: int, runs: dict[str, DocRun]) -> None:
    block = ALL_BLOCKS[doc][index]
    result = runs[doc].result(index)
    expected = int(block.markers.get("exit", "0"))
    assert result.returncode == expected, (
        f"{block.where}: exit {result.returncode}, expected {expected}{_missing_command(result.output)}\n"
        f"--- block\n{block.text}--- output\n{result.output[-3000:]}"
    )


@pytest.mark.parametrize(("doc", "index"), OUTPUT_CASES, ids=[ALL_BLOCKS[d][i].where for d, i in OUTPUT_CASES])
def test_documented_output_is_what_the_command_prints(doc: str, index: int, runs: dict[str, DocRun]) -> None:
    block = ALL_BLOCKS[doc][index]
    source = max((i for i, b in enumerate(ALL_BLOCKS[doc][:index]) if b.runnable), default=None)
    assert source is not None, f"{block.where}: an output block must follow a runnable bash block"
    actual = {_normal(line) for line in runs[doc].result(source).output.splitlines()}
    missing = [line for line in block.text.splitlines()
               if line.strip() and line.strip() != "..." and _normal(line) not in actual]
    assert not missing, (f"{block.where}: these lines are not in the output of the block at "
                         f"{ALL_BLOCKS[doc][source].where}:\n" + "\n".join(missing)
                         + "\n--- actual output\n" + runs[doc].result(source).output[-3000:])


def _normal(line: str) -> str:
    return " ".join(line.split())


@pytest.mark.parametrize(("doc", "index"), FILE_CASES, ids=[ALL_BLOCKS[d][i].where for d, i in FILE_CASES])
def test_a_block_that_quotes_a_file_matches_the_file(doc: str, index: int) -> None:
    block = ALL_BLOCKS[doc][index]
    name = block.markers.get("same-as") or block.markers["excerpt-of"]
    content = (REPO / name).read_text(encoding="utf-8")
    if "same-as" in block.markers:
        assert block.text == content, f"{block.where} differs from {name}"
    else:
        assert block.text in content, f"{block.where} is not an excerpt of {name}"


def test_every_not_run_block_says_why() -> None:
    unexplained = [b.where for blocks in ALL_BLOCKS.values() for b in blocks
                   if "not-run" in b.markers and len(b.markers["not-run"]) < 8]
    assert not unexplained, f"give a reason in <!-- not-run: reason -->: {unexplained}"


#: Commands that change a node or its GPUs by hand: the compiled tree does all of that (labels by the reconciler,
#: MIG layouts by the MIG manager), so the walk-through must never ask for one.
_HAND_STEPS = re.compile(r"kubectl\s+(label|annotate|taint|patch)\b|nvidia-smi|nvidia-mig-parted\s+apply"
                         r"|helm\s+(upgrade|install)")


def test_the_getting_started_walk_through_has_no_hand_step_on_a_node() -> None:
    steps = [(b.where, line) for b in ALL_BLOCKS["getting-started.md"] for line in b.text.splitlines()
             if _HAND_STEPS.search(line)]
    assert not steps, steps


def test_every_marker_is_one_the_runner_knows() -> None:
    known = {"not-run", "exit", "output", "same-as", "excerpt-of"}
    unknown = [(b.where, name) for blocks in ALL_BLOCKS.values() for b in blocks for name in b.markers
               if name not in known]
    assert not unknown


def test_every_gpupolicy_subcommand_the_docs_show_exists() -> None:
    from cli.main import COMMANDS

    shown = {(b.where, m[1]) for blocks in ALL_BLOCKS.values() for b in blocks if b.lang in {"bash", "sh"}
             for m in re.finditer(r"(?:^|[\s|;&(`])gpupolicy\s+([a-z][a-z-]*)", b.text)}
    unknown = sorted(f"{where}: gpupolicy {name}" for where, name in shown if name not in COMMANDS)
    assert not unknown


_LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_relative_links_and_anchors_in_the_docs_resolve(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    text = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))
    broken = []
    for match in _LINK.finditer(text):
        target = match["target"]
        if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
            continue
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in _anchors(path)):
            broken.append(target)
    assert not broken, f"{doc.name}: broken links {broken}"
