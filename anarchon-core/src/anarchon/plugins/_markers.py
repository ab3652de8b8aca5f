from __future__ import annotations

import pluggy

PROJECT = "anarchon"
ENTRY_POINT_GROUP = "anarchon"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a plugin's implementation of an anarchon hook: ``@hookimpl def anarchon_...``."""
