"""The package's layering (pyproject.toml [tool.importlinter]) holds: an import that breaks it fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "2 kept, 0 broken" in proc.stdout


def test_old_module_paths_still_import():
    import turboyolo.anchors
    import turboyolo.export
    import turboyolo.predict
    from turboyolo.data import anchors
    from turboyolo.infer import export, predict

    assert turboyolo.predict is predict and turboyolo.anchors is anchors and turboyolo.export is export
    assert callable(turboyolo.predict.Predictor) and callable(turboyolo.anchors.kmeans_anchors)
