"""Moved to :mod:`turboyolo.infer.predict`; this alias keeps ``turboyolo.predict`` importing for one
release (0.2) and warns."""

import sys
import warnings

from turboyolo.infer import predict as _moved

warnings.warn("turboyolo.predict moved to turboyolo.infer.predict; import it from there (the old path goes "
              "after 0.2)", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
