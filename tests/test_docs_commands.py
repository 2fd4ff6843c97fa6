"""Every ``fedchain`` command the README and the docs pages tell a reader to paste is one the
CLI accepts.

Commands are collected from fenced code blocks and from inline code (the tables of
``docs/i-want-to.md``), split at ``&&``, and judged by ``fedchain.cli.check_command``: the
parser, then the subcommand's pre-flight checks (run configuration, scenario and grid files,
option values), exactly as the CLI judges them before doing any work. Nothing is run. A
renamed option, a removed scenario file or a changed choice in the CLI fails here, naming
the page and line.
"""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

import pytest

from fedchain.cli import check_command

ROOT = Path(__file__).resolve().parent.parent
PREFIX = ".venv/bin/fedchain "
# Files the text tells the reader to write first: named, not shipped.
PLACEHOLDER_FILES = {"my-grid.toml", "my.toml"}

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE = re.compile(r"`([^`]*\.venv/bin/fedchain [^`]*)`")


def documented_commands(path: Path) -> list[tuple[int, str]]:
    """(line, command) for every ``.venv/bin/fedchain ...`` command of a Markdown file."""
    found: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        for text in [line] if fenced else _INLINE.findall(line):
            for part in re.split(r"&&|\bthen\b", text):
                command = part.strip()
                if command.startswith(PREFIX):
                    found.append((number, command.split(" #")[0].rstrip("\\ ").strip()))
    return found


def argv_of(command: str) -> list[str]:
    """The argv the shell would pass: globs expanded from the repository root, output
    redirections and ``[optional]`` notation dropped."""
    argv: list[str] = []
    for word in shlex.split(command)[1:]:
        if word.startswith(">"):
            break
        if word.startswith("[") and word.endswith("]"):
            continue
        if "*" in word:
            matches = sorted(glob.glob(word, root_dir=ROOT))
            argv.extend(matches or [word])
        else:
            argv.append(word)
    return argv


def problem(command: str) -> str | None:
    """The CLI's one-line refusal of ``command``, or None when it would start."""
    argv = argv_of(command)
    if "--help" in argv or set(argv) & PLACEHOLDER_FILES:
        return None
    return check_command(argv)


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMANDS = [
    (page, number, command) for page in PAGES for number, command in documented_commands(page)
]


def test_the_pages_have_commands_to_check() -> None:
    readme = [c for page, _, c in COMMANDS if page.name == "README.md"]
    i_want_to = [c for page, _, c in COMMANDS if page.name == "i-want-to.md"]
    assert len(readme) >= 6 and len(i_want_to) >= 25 and len(COMMANDS) >= 60


@pytest.mark.parametrize(
    "command",
    [c for _, _, c in COMMANDS],
    ids=[f"{page.name}:{number}" for page, number, _ in COMMANDS],
)
def test_documented_command_is_accepted_by_the_cli(command: str) -> None:
    assert problem(command) is None, f"{command!r}: {problem(command)}"


@pytest.mark.parametrize(
    "planted",
    [
        ".venv/bin/fedchain demo --clients ten",
        ".venv/bin/fedchain demo --no-such-option 1",
        ".venv/bin/fedchain run scenarios/no-such-scenario.toml",
        ".venv/bin/fedchain demo --rule no_such_rule",
    ],
)
def test_a_wrong_command_is_caught(tmp_path: Path, planted: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# Page\n\n```bash\n{planted}   # planted\n```\n", encoding="utf-8")
    [(number, command)] = documented_commands(page)
    assert (number, command) == (4, planted)
    assert problem(command) is not None
