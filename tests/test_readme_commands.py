"""The commands of the README and docs/ stay true.

- Every ``turboyolo`` command line in a code block of README.md or docs/*.md parses with the real parser,
  and its options build the command's typed request groups (each group validates its values), so a
  renamed, removed or re-typed flag cannot leave the documentation behind.
- Every command line of the README (``turboyolo``, ``make``, ``python``) is named in ``README_TESTS`` with
  the test that runs it; a README command without an entry, or an entry whose test is gone, fails.
- The README's quick starts run here, as written, on a tiny data set (substitutions in
  ``test_readme_quick_starts_run``).
- The README's command table lists every subcommand, and every relative link of README.md and docs/
  points at a file that exists.
"""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from turboyolo.cli import COMMANDS, build_parser, main
from turboyolo.options import read_flags

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MODULES = {name: module for name, module, _ in COMMANDS}

QUICK = "tests/test_readme_commands.py::test_readme_quick_starts_run"
MAKE = "tests/test_readme_commands.py::test_make_targets_run_what_the_readme_says"
# Each command line of the README -> the test that runs it ("path::name", name without parameters).
README_TESTS = {
    "make demo": MAKE,
    "make test": MAKE,
    "turboyolo detect photos/ --weights yolov3-tiny": QUICK,
    "turboyolo detect photos/ --weights yolov3-tiny --save-txt --conf-thres 0.4": QUICK,
    "turboyolo train --cfg yolov3-tiny --weights yolov3-tiny --data data.yaml --epochs 50":
        QUICK,
    "turboyolo test --weights runs/train/exp/weights/best.pt --data data.yaml": QUICK,
    "turboyolo detect photos/ --weights runs/train/exp/weights/best.pt --save-txt": QUICK,
    "python examples/train_custom.py examples/data.yaml":
        "tests/test_examples.py::test_train_custom_example_runs",
}


def code_lines(path: Path) -> list[str]:
    """The shell command lines of a Markdown file's code blocks (continuations joined, ``$`` prompts,
    comments and ``torchrun ... -m`` prefixes dropped); Python, YAML and output lines are left out."""
    lines, inside, pending = [], False, ""
    for line in path.read_text(encoding="utf-8").splitlines():
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
        text = re.sub(r"^torchrun .*?-m (turboyolo )", r"\1", text)
        if text.startswith(("turboyolo ", "make ", "python ")):
            lines.append(re.split(r"\s+#", text)[0].strip())
    return lines


def turboyolo_lines(paths: list[Path]) -> list[tuple[str, str]]:
    return [(path.name, line) for path in paths for line in code_lines(path) if line.startswith("turboyolo ")]


DOC_LINES = turboyolo_lines([README, *DOCS])


def test_the_docs_have_commands_for_every_documented_command():
    used = {line.split()[1] for _, line in DOC_LINES}
    assert len(DOC_LINES) > 30
    assert used >= {"detect", "train", "test", "export", "label", "anchors", "doctor", "fetch", "cfg",
                    "convert", "prepare", "bench"}


@pytest.mark.parametrize(("page", "line"), DOC_LINES, ids=[f"{page}: {line}" for page, line in DOC_LINES])
def test_documented_command_parses_and_its_options_validate(page, line):
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


def test_every_readme_command_names_the_test_that_runs_it():
    lines = code_lines(README)
    assert set(lines) == set(README_TESTS), "add the new README command, and its test, to README_TESTS"
    for test_id in set(README_TESTS.values()):
        file, name = test_id.split("::")
        assert re.search(rf"^def {name}\(", (ROOT / file).read_text(encoding="utf-8"), re.M), test_id


def test_the_readme_lists_every_command_with_a_page():
    text = README.read_text(encoding="utf-8")
    for name, _, _ in COMMANDS:
        row = re.search(rf"^\| `turboyolo {name}` \|.*\]\((docs/[A-Z_]+\.md)[#)]", text, re.M)
        assert row, f"the README's command table has no row for `turboyolo {name}` with a docs link"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda path: path.name)
def test_relative_links_point_at_files(page):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
        if "://" not in target:
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_make_targets_run_what_the_readme_says():
    """``make demo`` and ``make test`` are not run here (a venv install and a 10-minute fine-tune; make test
    would run this suite again): ``make -n`` shows that they install the package and run ``turboyolo
    demo`` (tests/test_demo_recipe.py checks the recipe it trains) and pytest."""
    for target, runs in (("demo", "-m turboyolo demo"), ("test", "-m pytest")):
        plan = subprocess.run(["make", "-n", "-W", "pyproject.toml", target], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout
        assert "pip install" in plan and runs in plan, plan


def _quick_start(title: str) -> list[str]:
    """The ``turboyolo`` lines of one README section's code blocks."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    section = text[start : text.index("\n## ", start + 3)]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [re.split(r"\s+#", line)[0].strip() for block in blocks for line in block.splitlines()
            if line.startswith("turboyolo ")]


@pytest.mark.slow
def test_readme_quick_starts_run(tmp_path, monkeypatch, tiny_weights, capsys):
    """Quick starts 1 and 2 as written, in a scratch folder with ``photos/`` and ``data.yaml`` (the README's,
    its ``path:`` pointed at a tiny synthetic set); substitutions for speed: train gets ``--epochs 1
    --img-size 64 --batch 2 --subdivisions 1 --workers 0``, test and detect ``--img-size 64``."""
    from synth import make_dataset

    root = make_dataset(tmp_path / "birds", 2, 1, size=64, num_classes=2).parent
    text = README.read_text(encoding="utf-8")
    doc = yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))
    doc["path"] = str(root)
    (tmp_path / "data.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "a.png").symlink_to(root / "images" / "val" / "val0.png")
    monkeypatch.chdir(tmp_path)
    lines = _quick_start("Quick start 1") + _quick_start("Quick start 2")
    assert len(lines) == 5
    extra = {"train": ["--img-size", "64", "--batch", "2", "--subdivisions", "1", "--workers", "0"],
             "test": ["--img-size", "64", "--workers", "0"], "detect": ["--img-size", "64"]}
    for line in lines:
        argv = shlex.split(line.replace("--epochs 50", "--epochs 1"))[1:]
        assert main(argv + extra[argv[0]]) == 0, line
    assert (tmp_path / "runs" / "train" / "exp" / "weights" / "best.pt").is_file()
    assert sorted(path.name for path in (tmp_path / "runs" / "detect").iterdir()) == ["exp", "exp2", "exp3"]
    for run in ("exp", "exp2", "exp3"):
        assert (tmp_path / "runs" / "detect" / run / "predictions.json").is_file()
