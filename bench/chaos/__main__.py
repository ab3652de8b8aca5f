"""``python -m bench.chaos TOPOLOGY [--option NAME] [--profile short|long] [--jobs N] [--out PATH]``
(and ``--faults N``, ``--claims N``, ``--nats-server PATH``, ``--max-minutes N``).

Runs the failover harness on one topology and option (``--option all``: each in turn), prints
each tally as JSON, and writes them to ``--out`` (default: nothing written). ``TOPOLOGY`` ``all``
runs every topology with every option, and ``--out`` is then a folder: one ``NAME.json`` each
(``nox -s chaos`` runs ``all --profile long --out bench/results/chaos``). ``--jobs N`` runs N
races at once, each on its own job (`Profile.jobs`; the long profile's default is the
topology's ``LONG_JOBS``, 1 unless it says otherwise); ``--faults N`` and ``--claims N`` change
the profile's minimums. ``--nats-server``: the binary of the ``nats-cluster`` servers (default:
``ANARCHON_TEST_NATS_SERVER``, else /usr/sbin/nats-server). ``--max-minutes``: no fault and no
new slot after that long, then count what was answered (for a store that stalls: the tally says
``stopped_early``)."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from .harness import PROFILES, run_chaos
from .topologies import TOPOLOGIES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("topology", choices=[*sorted(TOPOLOGIES), "all"])
    parser.add_argument("--option", default=None, help="the topology's option, or 'all'")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="independent races at once, each on its own job (default: the profile's, 1)",
    )
    parser.add_argument("--faults", type=int, default=None, help="at least N faults")
    parser.add_argument("--claims", type=int, default=None, help="at least N answers")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--nats-server", default=None, help="nats-cluster's nats-server binary")
    parser.add_argument("--max-minutes", type=float, default=None, help="stop a run after this")
    args = parser.parse_args(argv)
    changes = {"jobs": args.jobs, "faults": args.faults, "claims": args.claims}
    changes = {name: value for name, value in changes.items() if value is not None}
    # SIGTERM (and SIGINT, which a shell ignores in a background job) stops the run through its
    # `finally`, which stops the topology's servers, rather than leaving them behind.
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)
    names = sorted(TOPOLOGIES) if args.topology == "all" else [args.topology]
    for name in names:
        out = args.out / f"{name}.json" if args.topology == "all" and args.out else args.out
        option = "all" if args.topology == "all" else args.option
        run_topology(name, option, args.profile, out, changes, args.nats_server, args.max_minutes)
    return 0


def _exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def run_topology(
    name: str,
    option: str | None,
    profile: str,
    out: Path | None,
    changes: Mapping[str, int] | None = None,
    nats_server: str | None = None,
    max_minutes: float | None = None,
) -> None:
    """Run `profile` on topology `name`, with `changes` to its `Profile` fields (``jobs``,
    ``faults``, ``claims``: the options of the same names). Without ``jobs``, the long profile
    runs as many races at once as the topology's ``LONG_JOBS`` says (PostgreSQL: 16), else one.
    `nats_server`: the nats-cluster servers' binary; `max_minutes`: stop a run after that long."""
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
        topology = make(one, **extra)
        fields = dict(changes or {})
        if profile == "long":
            fields.setdefault("jobs", getattr(topology, "LONG_JOBS", 1))
        race = attrs.evolve(PROFILES[profile], **fields)
        command = ["python", "-m", "bench.chaos", name, "--option", one, "--profile", profile]
        for field, value in (changes or {}).items():
            command += [f"--{field}", str(value)]
        tally = run_chaos(
            topology,
            race,
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
