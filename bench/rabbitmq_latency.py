"""RabbitMQ claim latency against the broker's floor, and 10,000 jobs of one slot.

    .venv/bin/python bench/rabbitmq_latency.py [N] [JOBS]

Sequential claims, interleaved per iteration so machine load falls on all kinds alike:

* floor: publish + confirm of a persistent message to an existing plain queue, on the store's own
  channel (the least a confirmed claim can cost); a transient floor is printed for reference;
* won: a new slot each time (the broker creates the run's durable queue);
* lost: a slot already claimed (the queue exists and is full: the broker refuses the publish).

Then JOBS (10,000) jobs of one slot claimed concurrently by one instance (every claim creates a
queue), and the same again by a second instance (every claim is lost). Queues are deleted after.
Target (issue 7): claim <= 3x the floor; 10,000 jobs of one slot <= 5 s.
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
    base = time.time_ns() // 1_000_000 - 1_000
    lost_slot = base
    created.append(queue_name(prefix, "bench", lost_slot))
    assert (await store.claim(ClaimRequest(job="bench", slot=lost_slot, instance="b"))).won
    samples: dict[str, list[float]] = {k: [] for k in ("floor", "transient", "won", "lost")}
    for i in range(WARMUP + n):
        slot = base - 1 - i  # a new run (queue) each time
        created.append(queue_name(prefix, "bench", slot))
        won_request = ClaimRequest(job="bench", slot=slot, instance="b")
        lost_request = ClaimRequest(job="bench", slot=lost_slot, instance="b")
        timings: dict[str, float] = {}
        kinds = ["floor", "transient", "won", "lost"]
        kinds = kinds[i % 4 :] + kinds[: i % 4]
        for kind in kinds:
            started = time.perf_counter()
            if kind == "won":
                assert (await store.claim(won_request)).outcome is Outcome.WON
            elif kind == "lost":
                assert (await store.claim(lost_request)).outcome is Outcome.LOST
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
    for kind in ("floor", "transient", "won", "lost"):
        med, p99 = _ms(samples[kind])
        print(f"  {kind:9} {med:7.3f} / {p99:7.3f}   x{med / floor:5.2f}")
    transient_floor, _ = _ms(samples["transient"])
    for kind in ("won", "lost"):
        med, _ = _ms(samples[kind])
        print(f"  {kind} vs the transient floor: x{med / transient_floor:.2f}")


async def one_slot(jobs: int, prefix: str, created: list[str]) -> None:
    slot = time.time_ns() // 1_000_000
    created.extend(queue_name(prefix, f"j{j}", slot) for j in range(jobs))
    for label in ("first instance (every claim creates a queue)", "second instance (all lost)"):
        store = RabbitMQStore.create(URL, prefix=prefix, confirm_timeout_ms="120s")
        await store.open()
        requests = [ClaimRequest(job=f"j{j}", slot=slot, instance="b") for j in range(jobs)]
        started = time.perf_counter()
        claims = await asyncio.gather(*(store.claim(r) for r in requests))
        elapsed = time.perf_counter() - started
        outcomes = {str(o): sum(c.outcome is o for c in claims) for o in Outcome}
        print(
            f"{jobs} jobs of one slot, {label}: {elapsed:.2f} s "
            f"({jobs / elapsed:.0f} claims/s) { {k: v for k, v in outcomes.items() if v} }"
        )
        await store.close()


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
