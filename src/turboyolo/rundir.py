"""Run directories: ``<project>/<name>``, numbered ``exp``, ``exp2``, ... never overwriting."""

from __future__ import annotations

from pathlib import Path

from turboyolo.errors import OutputError, printable


def next_run_dir(project: str | Path, name: str = "exp", exist_ok: bool = False) -> Path:
    """Create and return a fresh run directory under ``project``.

    ``name`` is used as is when free (or when ``exist_ok``); otherwise ``name2``, ``name3``, ...
    Each candidate is claimed by creating it (``mkdir`` fails when it exists), so two runs started at
    the same moment get two directories, never one between them.
    Raises :class:`OutputError` when ``project`` cannot be written (read-only, full, no permission).
    """
    project = Path(project)
    candidate = project / name
    try:
        project.mkdir(parents=True, exist_ok=True)
        if exist_ok:
            candidate.mkdir(exist_ok=True)
            return candidate
        index = 1
        while True:
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                index += 1
                candidate = project / f"{name}{index}"
    except OSError as err:
        raise OutputError(f"{printable(candidate)}: cannot create the run directory ({err.strerror}); "
                          "choose a writable folder with --project") from None
