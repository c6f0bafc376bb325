"""A re-export of ``tests/support/forkapps.py``, so that ``tests/test_runtime.py``
imports unchanged.
Remove once it imports from ``tests.support``.
"""

from .support.forkapps import *  # noqa: F403
