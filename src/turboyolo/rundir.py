"""Run directories: ``<project>/<name>``, numbered ``exp``, ``exp2``, ... never overwriting."""

from __future__ import annotations

from pathlib import Path

from turboyolo.errors import OutputError, printable


def next_run_dir(project: str | Path, name: str = "exp", exist_ok: bool = False) -> Path:
    """Create and return a fresh run directory under ``project``.

    ``name`` is used as is when free (or when ``exist_ok``); otherwise ``name2``, ``name3``, ...
    Raises :class:`OutputError` when ``project`` cannot be written (read-only, full, no permission).
    """
    project = Path(project)
    candidate = project / name
    try:
        if exist_ok or not candidate.exists():
            candidate.mkdir(parents=True, exist_ok=True)
            return candidate
        index = 2
        while (project / f"{name}{index}").exists():
            index += 1
        candidate = project / f"{name}{index}"
        candidate.mkdir(parents=True)
        return candidate
    except OSError as err:
        raise OutputError(f"{printable(candidate)}: cannot create the run directory ({err.strerror}); "
                          "choose a writable folder with --project") from None
