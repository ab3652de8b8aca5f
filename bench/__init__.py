"""anarchon's benchmark suite: ``python -m bench [--quick] [--only ...] [--skip ...]``.

Every number it prints is a ratio to a floor or a peer measured in the same run, on the same
connection, interleaved with what it is compared to (see ``docs/benchmarks.md``).
"""
