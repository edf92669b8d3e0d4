"""Moved to :mod:`turboyolo.infer.export`; this alias keeps ``turboyolo.export`` importing for one
release (0.2) and warns."""

import sys
import warnings

from turboyolo.infer import export as _moved

warnings.warn("turboyolo.export moved to turboyolo.infer.export; import it from there (the old path goes "
              "after 0.2)", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
