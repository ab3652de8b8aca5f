"""NATS JetStream claim latency against the floor, and 10,000 jobs of one slot, per strategy.

    .venv/bin/python bench/nats_latency.py [N] [JOBS]

Sequential claims, interleaved per iteration so machine load falls on all kinds alike:

* floor: a plain JetStream publish (no headers) with nats-py's ``publish``, to the store's own
  stream on the store's own connection (the issue's reference floor);
* bare: the same publish on the claim's own path (one reply subscription, the acknowledgement
  read as JSON): the least a claim can cost on the path it takes;
* won: a new slot each time (msg-id: a new message id; expected-seq: a new subject);
* lost: a slot already claimed (msg-id: a duplicate acknowledgement, then the stored message is
  read back and its token compared; expected-seq: a refused publish, then the read-back).

Then JOBS (10,000) jobs of one slot through `claim_many` (every publish in flight at once) by one
instance (all won), and again by a second instance (all lost). Streams are deleted after.
Target (issue 7): a won claim <= 1.1x the floor; 10,000 jobs of one slot <= 0.5 s. Ratios are
given against both floors.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid

import nats

from anarchon import ClaimRequest, Outcome
from anarchon_nats import NATSStore

URL = os.environ.get("ANARCHON_TEST_NATS_URL", "nats://127.0.0.1:4222")
WARMUP = 100
STRATEGIES = ("msg-id", "expected-seq")


def _us(seconds: list[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    return statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.99) - 1] * 1e6


async def sequential(strategy: str, n: int, prefix: str) -> None:
    store = NATSStore.create(URL, prefix=prefix, strategy=strategy)
    await store.open()
    link = store._opened()  # the floor uses the store's own connection and stream
    js = link.js
    floor_subject = store.strategy.subject("floor", 0)
    body = b"x" * 120
    base = time.time_ns() // 1_000_000 - 30_000
    lost_slot = base - 1
    assert (await store.claim(ClaimRequest(job="bench", slot=lost_slot, instance="b"))).won
    replies, acks = link.replies, link.acks
    samples: dict[str, list[float]] = {k: [] for k in ("floor", "bare", "won", "lost")}
    for i in range(WARMUP + n):
        won_request = ClaimRequest(job="bench", slot=base + i, instance="b")
        lost_request = ClaimRequest(job="bench", slot=lost_slot, instance="b")
        kinds = ["floor", "bare", "won", "lost"]
        kinds = kinds[i % 4 :] + kinds[: i % 4]
        timings: dict[str, float] = {}
        for kind in kinds:
            started = time.perf_counter()
            if kind == "won":
                assert (await store.claim(won_request)).outcome is Outcome.WON
            elif kind == "lost":
                assert (await store.claim(lost_request)).outcome is Outcome.LOST
            elif kind == "bare":
                acks.read(await replies.request(floor_subject, body, None, 5.0))
            else:
                await js.publish(floor_subject, body)
            timings[kind] = time.perf_counter() - started
        if i >= WARMUP:
            for kind, value in timings.items():
                samples[kind].append(value)
    await store.close()
    floor, _ = _us(samples["floor"])
    bare, _ = _us(samples["bare"])
    print(
        f"{strategy}: sequential claims, n={n} each "
        "(median / p99 in us; ratio of medians to the floor, and to bare)"
    )
    for kind in ("floor", "bare", "won", "lost"):
        med, p99 = _us(samples[kind])
        print(f"  {kind:6} {med:8.1f} / {p99:8.1f}   x{med / floor:5.2f}   x{med / bare:5.2f}")


async def one_slot(strategy: str, jobs: int, prefix: str) -> None:
    slot = time.time_ns() // 1_000_000
    for label in ("first instance (all won)", "second instance (all lost)"):
        store = NATSStore.create(URL, prefix=prefix, strategy=strategy, timeout_ms="60s")
        await store.open()
        requests = [ClaimRequest(job=f"j{j}", slot=slot, instance="b") for j in range(jobs)]
        started = time.perf_counter()
        claims = await store.claim_many(requests)
        elapsed = time.perf_counter() - started
        outcomes = {str(o): sum(c.outcome is o for c in claims) for o in Outcome}
        print(
            f"{strategy}: {jobs} jobs of one slot, {label}: {elapsed:.3f} s "
            f"({jobs / elapsed:.0f} claims/s) { {k: v for k, v in outcomes.items() if v} }"
        )
        await store.close()


async def _delete(streams: list[str]) -> None:
    nc = await nats.connect(URL)
    try:
        for name in streams:
            await nc.jetstream().delete_stream(name)
    finally:
        await nc.close()


async def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    for strategy in STRATEGIES:
        prefix = "bench" + uuid.uuid4().hex[:8]
        try:
            await sequential(strategy, n, prefix)
            await one_slot(strategy, jobs, prefix)
        finally:
            await _delete([f"ANARCHON_{prefix}"])


if __name__ == "__main__":
    asyncio.run(main())
