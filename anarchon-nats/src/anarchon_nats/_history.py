"""`history`: a job's claims still in the stream (kept for ``max_age_ms``), newest slot first,
read with an ordered consumer of nats-py's JetStream context over the job's subjects. A message
that is not one of ours is reported with the runs (`DamagedHistory`), never executed."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from nats.js.api import DeliverPolicy

from anarchon import AnarchonError, RunRecord, StoreCorrupt
from anarchon.backend import HistoryReader

from ._connection import DRIVER_ERRORS
from ._records import decode

if TYPE_CHECKING:
    from ._connection import Link
    from ._strategies import Strategy

__all__ = ["read_history"]


async def read_history(link: Link, strategy: Strategy, job: str, limit: int) -> list[RunRecord]:
    """The `limit` (an int >= 0) newest claims of `job`, by slot."""
    js, stream = link.js, link.stream
    subject = strategy.job_subjects(job)
    try:
        info = await js.stream_info(stream, subjects_filter=subject)
        total = sum((info.state.subjects or {}).values())
        if total == 0 or limit == 0:
            return []
        newest: list[tuple[int, int, RunRecord]] = []
        # A message that is not one of ours is reported with the runs, the first `limit` of them.
        reader = HistoryReader(job)
        sub = await js.subscribe(
            subject, stream=stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
        )
        try:
            while True:
                msg = await sub.next_msg(timeout=link.timeout)
                meta = msg.metadata
                seq = meta.sequence.stream
                try:
                    run = decode(msg.data, stream=stream, seq=seq, when=meta.timestamp)
                    if run.job != job:
                        raise StoreCorrupt(
                            f"message {seq} of stream {stream} on subject {msg.subject} holds "
                            f"a claim of job {run.job!r}, not {job!r}: another program "
                            "published it; remove the message"
                        )
                except StoreCorrupt as exc:
                    if len(reader.damaged) < limit:
                        reader.damage(
                            f"message {seq} of stream {stream}",
                            str(exc),
                            slot=strategy.slot_of(msg.subject),
                        )
                else:
                    item = (run.slot, seq, run)
                    if len(newest) < limit:
                        heapq.heappush(newest, item)
                    else:
                        heapq.heappushpop(newest, item)
                if meta.num_pending == 0:
                    break
        finally:
            await sub.unsubscribe()
    except AnarchonError:
        raise
    except DRIVER_ERRORS as exc:
        raise link.error(exc) from None
    return reader.result([run for _, _, run in sorted(newest, reverse=True)])
