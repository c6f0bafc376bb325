"""A re-export of ``tests/support/stress.py``, so that ``tests/test_stress.py``
imports unchanged.
Remove once it imports from ``tests.support``.
"""

from .support.stress import *  # noqa: F403
