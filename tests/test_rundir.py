"""Run directories are claimed by creating them: runs started at the same moment with the same
--project/--name get one directory each, never one between them."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from turboyolo.rundir import next_run_dir


def test_a_directory_made_between_the_check_and_the_claim_is_not_shared(tmp_path, monkeypatch):
    (tmp_path / "exp").mkdir()  # another run made it just after this one looked
    monkeypatch.setattr(Path, "exists", lambda self: False)  # ... so this one saw it free
    assert next_run_dir(tmp_path, "exp") == tmp_path / "exp2"


def test_runs_started_at_once_get_one_directory_each(tmp_path):
    count, start, made = 16, threading.Barrier(16), []

    def claim():
        start.wait()
        made.append(next_run_dir(tmp_path / "runs", "exp"))

    threads = [threading.Thread(target=claim) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    names = ["exp", *(f"exp{i}" for i in range(2, count + 1))]
    assert sorted(made) == sorted(tmp_path / "runs" / name for name in names)
    assert next_run_dir(tmp_path / "runs", "exp", exist_ok=True) == tmp_path / "runs" / "exp"  # --exist-ok


def test_a_manifest_never_removes_anything_outside_its_run_directory_or_an_input(tmp_path):
    import json

    from turboyolo.rundir import MANIFEST, clear_previous_outputs, record_outputs

    run = tmp_path / "runs" / "exp"
    (run / "labels").mkdir(parents=True)
    victim, kept_input = tmp_path / "victim.txt", run / "drawn.jpg"
    victim.write_text("mine")
    for name in ("labels/a.txt", "drawn.jpg", "notes.md"):
        (run / name).write_text("x")
    record_outputs(run, [run / "labels" / "a.txt", kept_input])
    listed = json.loads((run / MANIFEST).read_text())
    (run / MANIFEST).write_text(json.dumps([*listed, "../../victim.txt", "/etc/hostname"]))
    note = clear_previous_outputs(run, keep=[kept_input])
    assert victim.read_text() == "mine" and kept_input.exists() and (run / "notes.md").exists()
    assert not (run / "labels").exists()  # its only file removed, then the empty folder
    assert "1 file(s) of the previous run" in note and "notes.md" in note


def test_output_names_never_shared_and_never_an_input(tmp_path):
    import pytest

    from turboyolo.errors import OutputError
    from turboyolo.rundir import OutputNames

    names = OutputNames(inputs=[tmp_path / "in.jpg"])
    assert names.name(tmp_path / "x.txt", "a.jpg", ".jpg") == tmp_path / "x.txt"
    assert names.name(tmp_path / "x.txt", "a.png", ".png") == tmp_path / "x_png.txt"
    assert names.name(tmp_path / "x.txt", "b.png", ".png") == tmp_path / "x_2.txt"
    assert names.name(tmp_path / "x.txt", "a.jpg", ".jpg") == tmp_path / "x.txt"  # the same owner again
    with pytest.raises(OutputError, match="is one of the inputs"):
        names.name(tmp_path / "in.jpg", "other", ".png")


def test_real_paths_resolve_as_realpath_does(tmp_path, monkeypatch):
    """Folders resolved once, a linked file resolved whole: the same answer as os.path.realpath for plain
    files, files in a linked folder, linked files, relative paths with '..', and paths that do not exist."""
    from turboyolo.rundir import RealPaths

    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    for name in ("a.jpg", "b.jpg"):
        (tmp_path / "real" / name).write_bytes(b"x")
    (tmp_path / "other" / "c.jpg").write_bytes(b"x")
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "c.jpg").symlink_to(tmp_path / "other" / "c.jpg")  # a linked file
    monkeypatch.chdir(tmp_path / "real" / "sub")
    paths = [tmp_path / "real" / "a.jpg", tmp_path / "linked" / "a.jpg", tmp_path / "linked" / "b.jpg",
             tmp_path / "linked" / "c.jpg", "../a.jpg", "../../linked/c.jpg", "a.jpg",
             tmp_path / "nowhere" / "x.jpg", tmp_path / "linked" / ".."]
    real = RealPaths()
    assert [real(p) for p in paths] == [os.path.realpath(p) for p in paths]
    assert real(tmp_path / "linked" / "c.jpg") == os.path.join(os.path.realpath(tmp_path), "other", "c.jpg")
