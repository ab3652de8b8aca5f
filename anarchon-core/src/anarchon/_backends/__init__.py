"""Backends shipped with the core package (only `memory://`)."""
