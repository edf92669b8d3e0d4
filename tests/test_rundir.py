"""Run directories are claimed by creating them: runs started at the same moment with the same
--project/--name get one directory each, never one between them."""

from __future__ import annotations

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
