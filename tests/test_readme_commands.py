"""Every ``turboyolo`` command line in the README's code blocks parses, and its options build the
command's typed request groups (each group validates its values), so a renamed or re-typed flag cannot
leave the README behind. Running each command in full is for the tests of its command."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

from turboyolo.cli import COMMANDS, build_parser
from turboyolo.options import read_flags

README = Path(__file__).parents[1] / "README.md"
MODULES = {name: module for name, module, _ in COMMANDS}


def readme_commands() -> list[str]:
    """The ``turboyolo ...`` command lines of the README's code blocks (continuations joined, comments,
    prompts and ``torchrun ... -m`` prefixes dropped)."""
    lines, inside, pending = [], False, ""
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        text = pending + " " + line.strip() if pending else line.strip()
        if text.endswith("\\"):
            pending = text[:-1]
            continue
        pending = ""
        text = re.sub(r"^\$ ", "", text)
        match = re.search(r"(?:^|-m )(turboyolo [a-z]+\b.*)", text)
        if match and (text.startswith(("turboyolo ", "torchrun "))):
            lines.append(match.group(1).split("  #")[0].split(" # ")[0].strip())
    return lines


COMMAND_LINES = readme_commands()


def test_the_readme_has_commands_for_every_documented_command():
    used = {line.split()[1] for line in COMMAND_LINES}
    assert len(COMMAND_LINES) > 30
    assert used >= {"detect", "train", "test", "export", "label", "anchors", "doctor", "fetch", "cfg",
                    "convert", "prepare", "bench"}


@pytest.mark.parametrize("line", COMMAND_LINES)
def test_readme_command_parses_and_its_options_validate(line):
    argv = shlex.split(line)[1:]
    parser = build_parser(only=argv[0])
    args = parser.parse_args(argv)  # SystemExit (argparse's error) fails the test
    module = importlib.import_module(f"turboyolo.commands.{MODULES[argv[0]]}")
    groups = getattr(module, "GROUPS", None)
    if groups is not None:
        assert read_flags(args, groups)  # each group's __post_init__ checks its values
    if argv[0] == "train":
        from turboyolo.train.config import TrainConfig

        if not args.resume and not getattr(args, "config", None):
            TrainConfig.from_flags(args)
