"""Moved to :mod:`turboyolo.infer.predict`;
this alias keeps ``turboyolo.predict`` importing for one release."""

import sys

from turboyolo.infer import predict as _moved

sys.modules[__name__] = _moved
