"""The README's Python API quick start and docs/DETECT.md's lower-level Python section, run as doctests
(official yolov3-tiny weights, Darknet's dog.jpg)."""

from __future__ import annotations

import doctest
import os
import shutil
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"
DETECT = Path(__file__).parents[1] / "docs" / "DETECT.md"
DOG = Path("/usr/share/darknet/data/dog.jpg")


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 3)
    return text[start : end if end > 0 else None]


@pytest.mark.slow
def test_readme_python_api_examples(tiny_weights, tmp_path, monkeypatch):
    if not DOG.is_file():
        pytest.skip(f"{DOG} (Darknet's sample photo) is not installed")
    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model.zoo import make_spec

    shutil.copy(DOG, tmp_path / "dog.jpg")
    write_cfg(make_spec("yolov3-tiny", 80, batch=1, subdivisions=1), tmp_path / "yolov3-tiny.cfg")
    os.symlink(tiny_weights, tmp_path / "yolov3-tiny.weights")
    monkeypatch.chdir(tmp_path)
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for page, title, at_least in ((README, "Quick start 3: the Python API", 10),
                                  (DETECT, "From Python, lower level", 3)):
        text = _section(page.read_text(encoding="utf-8"), title)
        test = parser.get_doctest(text, {}, f"{page.name}#{title}", str(page), 0)
        assert len(test.examples) >= at_least, (page, title)
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} README example(s) failed (see the output above)"
