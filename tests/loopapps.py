"""A re-export of ``tests/support/loopapps.py``, so that ``tests/test_runtime.py``
imports unchanged.
Remove once it imports from ``tests.support``.
"""

from .support.loopapps import *  # noqa: F403
