"""``python -m bench.chaos TOPOLOGY [--option NAME] [--profile short|long] [--out PATH]``.

Runs the failover harness on one topology and option (``--option all``: each in turn), prints
each tally as JSON, and writes them to ``--out`` (default: nothing written). ``TOPOLOGY`` ``all``
runs every topology with every option, and ``--out`` is then a folder: one ``NAME.json`` each
(``nox -s chaos`` runs ``all --profile long --out bench/results/chaos``)."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from .harness import PROFILES, run_chaos
from .topologies import TOPOLOGIES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("topology", choices=[*sorted(TOPOLOGIES), "all"])
    parser.add_argument("--option", default=None, help="the topology's option, or 'all'")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.topology != "all":
        run_topology(args.topology, args.option, args.profile, args.out)
        return 0
    for name in sorted(TOPOLOGIES):
        out = None if args.out is None else args.out / f"{name}.json"
        run_topology(name, "all", args.profile, out)
    return 0


def run_topology(name: str, option: str | None, profile: str, out: Path | None) -> None:
    options, make = TOPOLOGIES[name]
    chosen = list(options) if option == "all" else [option or options[0]]
    tallies = []
    for one in chosen:
        command = ["python", "-m", "bench.chaos", name, "--option", one, "--profile", profile]
        tally = run_chaos(make(one), PROFILES[profile], command=shlex.join(command))
        tallies.append(tally.as_json())
        print(json.dumps(tallies[-1], indent=2), flush=True)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(tallies, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
