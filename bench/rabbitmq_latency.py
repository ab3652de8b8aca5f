"""RabbitMQ claim latency against the broker's floor, and 10,000 jobs of one slot.

    .venv/bin/python bench/rabbitmq_latency.py [N] [JOBS]

Sequential claims, interleaved per iteration so machine load falls on all kinds alike:

* floor: publish + confirm of a persistent message to an existing plain queue, on the store's own
  channel (the least a confirmed claim can cost); a transient floor is printed for reference;
* won: a new slot each time, its queue prepared ahead (untimed, `LEAD` runs ahead of its claim),
  as the scheduler does `prepare_ahead_ms` before a slot;
* won cold: a new slot each time, not prepared (the broker creates the run's durable queue in the
  claim): what `anarchon.once` or a scheduler started within a slot's lead pays;
* lost: a slot already claimed (the queue exists and is full: the broker refuses the publish).

Then JOBS (10,000) jobs of one slot: prepared (timed apart), claimed concurrently by one instance
(all won) and again by a second (all lost); then another slot claimed cold. Queues are deleted
after. Target (issue 7): claim <= 3x the floor; 10,000 jobs of one slot <= 5 s.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid

import aiormq
from pamqp import commands as spec

from anarchon import ClaimRequest, Outcome
from anarchon_rabbitmq import RabbitMQStore, queue_name

URL = os.environ.get("ANARCHON_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
WARMUP = 50
LEAD = 100
"""Runs prepared ahead of their claim in the sequential measure (about 0.3 s ahead)."""


def _ms(seconds: list[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.99) - 1] * 1000


async def _delete(names: list[str]) -> None:
    connection = await aiormq.connect(URL)
    try:
        channel = await connection.channel()
        for start in range(0, len(names), 500):
            for name in names[start : start + 500]:
                await channel.queue_delete(name, nowait=True)
            await channel.basic_qos(prefetch_count=0)  # a round trip: the deletes went through
    finally:
        await connection.close()


async def sequential(n: int, prefix: str, created: list[str]) -> None:
    store = RabbitMQStore.create(URL, prefix=prefix, slot_ttl_ms="10m", channels=1)
    await store.open()
    channel = await store._link.channel()  # the floor uses the store's own channel
    floor_queue = f"{prefix}.floor"
    created.append(floor_queue)
    await channel.queue_declare(floor_queue, durable=True, arguments={"x-max-length": 100})
    persistent = spec.Basic.Properties(delivery_mode=2)
    transient = spec.Basic.Properties(delivery_mode=1)
    # Slots 30 s ahead: the store prepares only slots that have not come yet.
    base = time.time_ns() // 1_000_000 + 30_000
    lost_slot = base
    created.append(queue_name(prefix, "bench", lost_slot))
    assert (await store.claim(ClaimRequest(job="bench", slot=lost_slot, instance="b"))).won
    kinds = ["floor", "transient", "won", "won cold", "lost"]
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    prepared = 0
    for i in range(WARMUP + n):
        slot = base - 1 - i  # a new run (queue) each time
        created += [queue_name(prefix, "bench", slot), queue_name(prefix, "cold", slot)]
        # As the scheduler does ahead of a slot (a minute by default): here LEAD runs ahead.
        while prepared < min(i + LEAD, WARMUP + n):
            await store.prepare(["bench"], base - 1 - prepared)
            prepared += 1
        requests = {
            "won": ClaimRequest(job="bench", slot=slot, instance="b"),
            "won cold": ClaimRequest(job="cold", slot=slot, instance="b"),
            "lost": ClaimRequest(job="bench", slot=lost_slot, instance="b"),
        }
        timings: dict[str, float] = {}
        for kind in kinds[i % 5 :] + kinds[: i % 5]:
            started = time.perf_counter()
            if kind in requests:
                claim = await store.claim(requests[kind])
                assert claim.outcome is (Outcome.LOST if kind == "lost" else Outcome.WON), claim
            else:
                await channel.basic_publish(
                    b"x" * 150,
                    routing_key=floor_queue,
                    properties=persistent if kind == "floor" else transient,
                    mandatory=True,
                )
            timings[kind] = time.perf_counter() - started
        if i >= WARMUP:
            for kind, value in timings.items():
                samples[kind].append(value)
    await store.close()
    floor, _ = _ms(samples["floor"])
    print(f"sequential claims, n={n} each (median / p99, ms; ratio of medians to the floor)")
    print("  won: the run's queue was prepared ahead (the scheduler's path); won cold: not")
    for kind in kinds:
        med, p99 = _ms(samples[kind])
        print(f"  {kind:9} {med:7.3f} / {p99:7.3f}   x{med / floor:5.2f}")
    transient_floor, _ = _ms(samples["transient"])
    for kind in ("won", "won cold", "lost"):
        med, _ = _ms(samples[kind])
        print(f"  {kind} vs the transient floor: x{med / transient_floor:.2f}")


async def _claim_all(store: RabbitMQStore, jobs: list[str], slot: int, label: str) -> None:
    requests = [ClaimRequest(job=job, slot=slot, instance="b") for job in jobs]
    started = time.perf_counter()
    claims = await asyncio.gather(*(store.claim(r) for r in requests))
    elapsed = time.perf_counter() - started
    outcomes = {str(o): sum(c.outcome is o for c in claims) for o in Outcome}
    print(
        f"{len(jobs)} jobs of one slot, {label}: {elapsed:.2f} s "
        f"({len(jobs) / elapsed:.0f} claims/s) { {k: v for k, v in outcomes.items() if v} }"
    )


async def one_slot(jobs: int, prefix: str, created: list[str]) -> None:
    """One slot of `jobs` jobs prepared ahead (as the scheduler does), claimed by a first
    instance (all won) and a second (all lost); then another slot claimed cold."""
    names = [f"j{j}" for j in range(jobs)]
    slot = time.time_ns() // 1_000_000 + 58_000  # within the default lead (60 s) ahead
    cold = slot - 1
    created.extend(queue_name(prefix, job, s) for job in names for s in (slot, cold))
    first = RabbitMQStore.create(URL, prefix=prefix, confirm_timeout_ms="120s")
    second = RabbitMQStore.create(URL, prefix=prefix, confirm_timeout_ms="120s")
    await first.open()
    await second.open()
    try:
        started = time.perf_counter()
        await first.prepare(names, slot)
        elapsed = time.perf_counter() - started
        print(f"{jobs} jobs of one slot prepared ahead: {elapsed:.2f} s ({jobs / elapsed:.0f}/s)")
        await _claim_all(first, names, slot, "prepared, first instance")
        await _claim_all(second, names, slot, "prepared, second instance (all lost)")
        await _claim_all(first, names, cold, "cold, first instance (every claim creates a queue)")
    finally:
        await first.close()
        await second.close()


async def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    prefix = "bench" + uuid.uuid4().hex[:8]
    created: list[str] = []
    try:
        await sequential(n, prefix, created)
        await one_slot(jobs, prefix, created)
    finally:
        await _delete(created)


if __name__ == "__main__":
    asyncio.run(main())
