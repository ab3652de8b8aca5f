"""``python -m bench.chaos TOPOLOGY [--option NAME] [--profile short|long] [--out PATH]
[--nats-server PATH] [--max-minutes N]``.

Runs the failover harness on one topology and option (``--option all``: each in turn), prints
each tally as JSON, and writes them to ``--out`` (default: nothing written). ``TOPOLOGY`` ``all``
runs every topology with every option, and ``--out`` is then a folder: one ``NAME.json`` each
(``nox -s chaos`` runs ``all --profile long --out bench/results/chaos``). ``--nats-server``: the
binary of the ``nats-cluster`` servers (default: ``ANARCHON_TEST_NATS_SERVER``, else
/usr/sbin/nats-server). ``--max-minutes``: no fault and no new slot after that long, then count
what was answered (for a store that stalls: the tally says ``stopped_early``)."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from .harness import PROFILES, run_chaos
from .topologies import TOPOLOGIES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("topology", choices=[*sorted(TOPOLOGIES), "all"])
    parser.add_argument("--option", default=None, help="the topology's option, or 'all'")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--nats-server", default=None, help="nats-cluster's nats-server binary")
    parser.add_argument("--max-minutes", type=float, default=None, help="stop a run after this")
    args = parser.parse_args(argv)
    names = sorted(TOPOLOGIES) if args.topology == "all" else [args.topology]
    for name in names:
        out = args.out / f"{name}.json" if args.topology == "all" and args.out else args.out
        option = "all" if args.topology == "all" else args.option
        run_topology(name, option, args.profile, out, args.nats_server, args.max_minutes)
    return 0


def run_topology(
    name: str,
    option: str | None,
    profile: str,
    out: Path | None,
    nats_server: str | None = None,
    max_minutes: float | None = None,
) -> None:
    options, make = TOPOLOGIES[name]
    chosen = list(options) if option == "all" else [option or options[0]]
    extra: dict[str, Any] = {}
    tail: list[str] = []
    if nats_server is not None and name == "nats-cluster":
        extra["server"] = nats_server
        tail += ["--nats-server", nats_server]
    if max_minutes is not None:
        tail += ["--max-minutes", f"{max_minutes:g}"]
    tallies = []
    for one in chosen:
        command = ["python", "-m", "bench.chaos", name, "--option", one, "--profile", profile]
        tally = run_chaos(
            make(one, **extra),
            PROFILES[profile],
            command=shlex.join(command + tail),
            max_seconds=None if max_minutes is None else max_minutes * 60,
        )
        tallies.append(tally.as_json())
        print(json.dumps(tallies[-1], indent=2), flush=True)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(tallies, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
