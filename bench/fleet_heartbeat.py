"""The fleet's heartbeat cost alone (issue 25): ``python -m bench.fleet_heartbeat FLEET_JSON``.

For every target of a fleet result file (``bench/results/fleet.json``), start its private
server again, measure one refresh of N = 1 to 128 members (`bench.fleet._heartbeat`: each
announces itself and reads the list) and write the rows into the file's ``heartbeat`` entries,
so the heartbeat can be measured again without the whole fleet phase."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from ._fleet_servers import start_probe
from .fleet import FLEET_TARGETS, FULL, _heartbeat, _url


def main(path: str) -> None:
    file = Path(path)
    data = json.loads(file.read_text())
    fleet = data.get("fleet", data)
    chosen = {t["target"] for t in fleet["targets"]}
    with tempfile.TemporaryDirectory(prefix="anarchon-hb-") as tmp:
        for name, backend, strategy in FLEET_TARGETS:
            if name not in chosen:
                continue
            folder = Path(tmp) / name.replace("/", "-")
            folder.mkdir()
            probe = start_probe(backend, strategy, folder)
            try:
                url = _url(backend, strategy, probe.url, "fleethb")
                result = asyncio.run(_heartbeat(url, FULL["fleet_sizes"], probe))
            finally:
                probe.stop()
            for target in fleet["targets"]:
                if target["target"] == name:
                    target["heartbeat"] = result
            print(name, result, flush=True)
    file.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:2])
