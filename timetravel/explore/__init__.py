"""Explore: turn a recording into answers (seek, branch, compare, diff, search, minimize).

The command language in :mod:`timetravel.explore.commands` is what every front end calls.
"""
