"""The failover harness: many processes race on ascending slots while a topology's primary or
leader is killed, restarted or partitioned away, again and again; then every slot is counted.

``python -m bench.chaos TOPOLOGY [--option NAME] [--profile short|long] [--jobs N] [--out FILE]``
runs one topology (`topologies.TOPOLOGIES`) and prints and writes its tally (`Tally`) as JSON.

How a run goes (`run_chaos`):

1. The topology starts its servers (free 127.0.0.1 ports, temp dirs) and gives the URL clients use.
2. `processes` workers (`worker`) open the store; on ``go``, each claims the slots ``first_slot +
   i * step`` in order, every slot from `tasks` asyncio tasks at once, each claim with a new token.
   With ``--jobs N`` (`Profile.jobs`) each worker runs N such races at once, each on its own job.
   A claim that raises or answers ``unknown`` is sent again with the same token (C3) until it gets
   a definite answer or `give_up_ms` passes (then it counts as ``unknown``). Every answer is one
   JSON line in the worker's own file, so a worker that hangs or dies still leaves its record.
3. Meanwhile the harness injects a fault every `fault_every_s` (`Topology.fault`), waits until a
   probe claim is decided again, and notes when each fault began.
4. When the workers are done it counts every slot (`tally`): contested claims, duplicate winners,
   slots nobody won, ``unknown`` answers, time to recover (fault to the first ``won`` after it),
   and, with one fresh claim per decided slot, the slots the store forgot (winnable again).

Claims use a long lease, one attempt and ``overlap=allow``, so that within a run nothing but the
store's own memory can decide a slot twice.
"""

from __future__ import annotations

from .harness import Fault, Profile, Tally, Topology, run_chaos, tally

__all__ = ["Fault", "Profile", "Tally", "Topology", "run_chaos", "tally"]
