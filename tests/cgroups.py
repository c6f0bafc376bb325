"""A re-export of ``tests/support/cgroups.py``, so that ``tests/e2e/checks.py``
imports unchanged.
Remove once it imports from ``tests.support``.
"""

from .support.cgroups import available_cpus, cpu_quota, memory_limit

__all__ = ["available_cpus", "cpu_quota", "memory_limit"]
