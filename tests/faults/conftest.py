"""Fault-injection suite: each test feeds the CLI a hostile input as a user would and checks the exit
code, that no traceback (or crash) reaches the user, and that the file is named in the output or report.

``cli`` runs ``python -m turboyolo`` in a fresh process (a crash such as OpenCV's signal 11 on a file
name that is not UTF-8 must not take pytest down with it) with a UTF-8 locale whose streams are strict,
as on a user's machine, and with its own empty cache.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


@dataclass
class Run:
    returncode: int
    output: str  # stdout and stderr together

    def assert_clean(self, returncode: int) -> None:
        """Exit code as expected, and nothing a user should never see."""
        assert self.returncode == returncode, f"exit {self.returncode}, expected {returncode}:\n{self.output}"
        for word in ("Traceback", "Segmentation fault", "core dumped"):
            assert word not in self.output, self.output


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """``cli(*args, process=False, cwd=None, timeout=180) -> Run``: ``turboyolo args``.

    In this process by default (``turboyolo.cli.main``, output through strict UTF-8 streams as on a
    user's terminal; torch is imported once); ``process=True`` runs ``python -m turboyolo`` in a fresh
    process, for inputs that once crashed the interpreter (OpenCV's signal 11 on a non-UTF-8 name).
    """
    cache = tmp_path / "cache"
    monkeypatch.setenv("TURBOYOLO_CACHE", str(cache))
    monkeypatch.setenv("TURBOYOLO_OFFLINE", "1")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONIOENCODING", "LC_", "PYTHONUTF8"))}
    # C.UTF-8 (not C): Python's streams are then strict UTF-8, where a non-UTF-8 file name breaks print
    env.update(PYTHONPATH=str(SRC), LANG="C.UTF-8", LC_ALL="C.UTF-8", OMP_NUM_THREADS="1")

    def run(*args, process=False, cwd=None, timeout=180) -> Run:
        if process:
            done = subprocess.run([sys.executable, "-m", "turboyolo", *map(_arg, args)], cwd=cwd or tmp_path,
                                  env=env, capture_output=True, timeout=timeout)
            output = (done.stdout + done.stderr).decode("utf-8", "backslashreplace")
            if done.returncode < 0:  # e.g. -11: OpenCV crashed on a file name
                output += f"\nkilled by signal {-done.returncode}"
            return Run(done.returncode, output)
        return _in_process([str(a) for a in args], cwd or tmp_path, monkeypatch)

    return run


def _in_process(argv: list[str], cwd: Path, monkeypatch) -> Run:
    from turboyolo.cli import main

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    monkeypatch.chdir(cwd)
    with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        try:
            code = main(argv)
        except SystemExit as done:  # argparse
            code = done.code if isinstance(done.code, int) else 1
        except Exception:  # what a user would see as a traceback
            stream.write(traceback.format_exc())
            code = 1
    return Run(code, raw.getvalue().decode("utf-8", "backslashreplace"))


def _arg(value) -> str | bytes:
    return os.fsencode(value) if isinstance(value, Path) else str(value)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """(cfg, .weights, names, checkpoint .pt) of a 2-class yolov3-tiny at 64 px whose heads fire in every
    cell (so detect has boxes to draw without training)."""
    import torch

    from turboyolo.formats.darknet_cfg import format_cfg, write_cfg
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.loading import save_darknet_weights
    from turboyolo.model.zoo import make_spec

    folder = tmp_path_factory.mktemp("tiny_model")
    spec = make_spec("yolov3-tiny", num_classes=2, width=64, height=64, batch=2, subdivisions=1)
    torch.manual_seed(0)
    model = Darknet(spec)
    with torch.no_grad():
        for head in (15, 22):
            model.layers[head].conv.weight.zero_()
            model.layers[head].conv.bias.fill_(3.0)
    cfg = write_cfg(spec, folder / "m.cfg")
    weights = save_darknet_weights(model, folder / "m.weights")
    names = folder / "m.names"
    names.write_text("apple\nbanana\n")
    checkpoint = folder / "m.pt"
    torch.save({"model": model.state_dict(), "cfg_text": format_cfg(spec)}, checkpoint)
    return cfg, weights, names, checkpoint


BIND_READ_ONLY = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


def _unshare_works(tmp: Path) -> bool:
    if not shutil.which("unshare"):
        return False
    probe = tmp / "probe"
    probe.mkdir(exist_ok=True)
    done = subprocess.run(["unshare", "-rm", "sh", "-c", BIND_READ_ONLY + " 2>/dev/null", str(probe), "sh",
                           "-c", f"! touch {probe}/x"], capture_output=True)
    return done.returncode == 0 and not (probe / "x").exists()


@pytest.fixture
def read_only(tmp_path, monkeypatch):
    """``read_only(folder, *args) -> Run``: ``turboyolo args`` in a fresh process while ``folder`` cannot
    be written (what a read-only mount does), with the test's cache and offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONIOENCODING", "LC_", "PYTHONUTF8"))}
    env.update(PYTHONPATH=str(SRC), LANG="C.UTF-8", LC_ALL="C.UTF-8", OMP_NUM_THREADS="1",
               TURBOYOLO_CACHE=str(tmp_path / "cache"), TURBOYOLO_OFFLINE="1")
    bind = _unshare_works(tmp_path)
    if not bind and os.geteuid() == 0:
        pytest.skip("root writes into chmod-ed folders and unshare cannot bind a folder read-only here")

    def run(folder: Path, *args, cache: Path | None = None) -> Run:
        command = [sys.executable, "-m", "turboyolo", *map(str, args)]
        environment = {**env, **({"TURBOYOLO_CACHE": str(cache)} if cache else {})}
        if bind:
            command = ["unshare", "-rm", "sh", "-c", BIND_READ_ONLY, str(folder), *command]
        else:
            folder.chmod(0o555)
        try:
            done = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, timeout=300)
        finally:
            folder.chmod(0o755)
        return Run(done.returncode, (done.stdout + done.stderr).decode("utf-8", "backslashreplace"))

    return run
