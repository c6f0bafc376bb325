"""Helpers shared by the tests: real cgroups, forked children, apps, sizes, a browser.

No test module imports another; what two of them share lives here.
"""
