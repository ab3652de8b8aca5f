"""Reading the stream: a job's claims (`history`, newest slot first) and the jobs it holds claims
of (`jobs`).

Only two JetStream requests are used, both reads: the stream's info with a subject filter (how
many messages each subject holds) and a message get by sequence or subject. No consumer is
created, so a NATS user allowed only ``$JS.API.STREAM.INFO.<stream>`` and
``$JS.API.STREAM.MSG.GET.<stream>`` (and its reply inbox) can read everything, and a read leaves
no trace on the server (rule R1).

* expected-seq keeps one subject per run: the info names the slots, and only the newest `limit`
  subjects are read, each with one get, many at once.
* msg-id keeps every claim of a job on one subject: its messages are read with gets of "the next
  message on the subject from sequence n", by several readers at once, each over a share of the
  stream's sequences.

A message that is not one of ours is reported with the runs (`DamagedHistory`), never executed.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import heapq
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
from nats.js.errors import NotFoundError

from anarchon import AnarchonError, RunRecord, StoreCorrupt
from anarchon.backend import HistoryReader

from ._answers import NotAnAnswer, read_info, read_message
from ._connection import DRIVER_ERRORS, JS_API
from ._records import decode

if TYPE_CHECKING:
    from ._connection import Link
    from ._strategies import Strategy

__all__ = ["Subjects", "read_history", "read_jobs", "read_subjects"]

GETS_AT_ONCE = 32
"""Message gets one read keeps on the wire at once."""
READERS = 16
"""msg-id: readers that walk a share of the stream's sequences each."""
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
T = TypeVar("T")


@attrs.frozen
class Subjects:
    """What the stream's info says about the subjects of a filter."""

    counts: dict[str, int]
    """Messages per subject (subjects without messages are left out by the server)."""
    first_seq: int
    last_seq: int


@attrs.frozen
class Stored:
    seq: int
    subject: str
    body: bytes
    when: datetime.datetime | None


async def read_subjects(link: Link, subjects_filter: str) -> Subjects:
    """The message count of every subject of the stream that `subjects_filter` matches. The
    server answers at most 100,000 subjects at a time; the rest are asked for by offset."""
    counts: dict[str, int] = {}
    api = f"{JS_API}.STREAM.INFO.{link.stream}"
    while True:
        query: dict[str, Any] = {"subjects_filter": subjects_filter}
        if counts:
            query["offset"] = len(counts)
        data = await link.replies.request(api, json.dumps(query).encode(), None, link.timeout)
        info = read_info(data)
        state = info["state"]
        page = state.get("subjects") or {}
        if not isinstance(page, dict) or not all(isinstance(n, int) for n in page.values()):
            raise NotAnAnswer(data, "a stream's info with subject counts")
        before = len(counts)
        counts.update(page)
        total = info.get("total")
        if not isinstance(total, int) or len(counts) >= total or len(counts) == before:
            break
    return Subjects(
        counts=counts,
        first_seq=int(state.get("first_seq") or 0),
        last_seq=int(state.get("last_seq") or 0),
    )


async def _get(link: Link, query: dict[str, Any]) -> Stored | None:
    """One message get; None when there is no such message."""
    try:
        data = await link.replies.request(
            link.get_api, json.dumps(query).encode(), None, link.timeout
        )
        seq, subject, body, when = read_message(data)
    except NotFoundError:
        return None
    return Stored(seq=seq, subject=subject, body=body, when=when)


async def _walk(link: Link, subject: str, first: int, last: int) -> list[Stored]:
    """Every message on `subject` with a sequence from `first` to `last`, in order."""
    found: list[Stored] = []
    seq = first
    while seq <= last:
        stored = await _get(link, {"seq": seq, "next_by_subj": subject})
        if stored is None or stored.seq > last:
            break
        found.append(stored)
        seq = stored.seq + 1
    return found


async def _bounded(calls: Iterable[Callable[[], Awaitable[T]]], at_once: int) -> list[T]:
    gate = asyncio.Semaphore(at_once)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return list(await asyncio.gather(*(one(call) for call in calls)))


async def _messages(link: Link, strategy: Strategy, job: str, limit: int) -> list[Stored]:
    """The messages `history` decodes: for expected-seq, those of the newest `limit` slots (and
    of every subject that names no slot); for msg-id, all of the job's."""
    subjects = await read_subjects(link, strategy.job_subjects(job))
    counts = subjects.counts
    if not counts:
        return []
    first, last = subjects.first_seq, subjects.last_seq
    if not strategy.per_slot:
        # All the job's claims on one subject (msg-id): shares of the sequences, read at once.
        shares = []
        for subject, count in counts.items():
            step = (last - first) // max(1, min(READERS, count)) + 1
            shares += [(subject, a, min(last, a + step - 1)) for a in range(first, last + 1, step)]
        parts = await _bounded(
            [functools.partial(_walk, link, *share) for share in shares], READERS
        )
        return [stored for part in parts for stored in part]
    slotted = sorted(
        ((slot, s) for s in counts if (slot := strategy.slot_of(s)) is not None), reverse=True
    )
    chosen = [s for _, s in slotted[:limit]] + [s for s in counts if strategy.slot_of(s) is None]

    async def read(subject: str) -> list[Stored]:
        if counts[subject] == 1:
            stored = await _get(link, {"last_by_subj": subject})
            return [] if stored is None else [stored]
        return await _walk(link, subject, first, last)  # not ours alone: read every message

    parts = await _bounded([functools.partial(read, s) for s in chosen], GETS_AT_ONCE)
    return [stored for part in parts for stored in part]


async def read_history(link: Link, strategy: Strategy, job: str, limit: int) -> list[RunRecord]:
    """The `limit` (an int >= 0) newest claims of `job`, by slot."""
    stream = link.stream
    if limit == 0:
        return []
    try:
        messages = await _messages(link, strategy, job, limit)
    except AnarchonError:
        raise
    except DRIVER_ERRORS as exc:
        raise link.error(exc) from None
    newest: list[tuple[int, int, RunRecord]] = []
    # A message that is not one of ours is reported with the runs, the first `limit` of them.
    reader = HistoryReader(job)
    for msg in sorted(messages, key=lambda m: m.seq):
        seq = msg.seq
        try:
            run = decode(msg.body, stream=stream, seq=seq, when=msg.when)
            if run.job != job:
                raise StoreCorrupt(
                    f"message {seq} of stream {stream} on subject {msg.subject} holds a claim "
                    f"of job {run.job!r}, not {job!r}: another program published it; remove "
                    "the message"
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
    return reader.result([run for _, _, run in sorted(newest, reverse=True)])


async def read_jobs(link: Link, strategy: Strategy) -> list[str]:
    """The jobs with at least one claim message in the stream, sorted: the second token of
    each subject the stream holds messages on (one stream info request, or one per 100,000
    subjects). A subject whose token is no job name (another program's) is left out."""
    try:
        subjects = await read_subjects(link, strategy.pattern)
    except AnarchonError:
        raise
    except DRIVER_ERRORS as exc:
        raise link.error(exc) from None
    names = {subject.split(".")[1] for subject, n in subjects.counts.items() if n > 0}
    return sorted(name for name in names if _JOB.fullmatch(name))
