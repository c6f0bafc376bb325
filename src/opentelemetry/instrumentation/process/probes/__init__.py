"""Hooks into the Python runtime: garbage-collection pauses and event-loop lag.

These keep running totals between collections (a pause happens whenever it
happens, not when a collection asks), and a snapshot source reads them.
Nothing here knows about OpenTelemetry.
"""
