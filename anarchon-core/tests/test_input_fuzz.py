"""Bad input never crashes (issue 21, item 5, and the enormous lease of item 6).

Two parts. First one regression test per input the issue names, each of which raised a raw
exception (or was taken and broke something later) before. Then a fuzz harness: Hypothesis feeds
the public API (`Schedule.parse` and its slots, `to_ms`, `ClaimRequest` and its claim on
``memory://`` and SQLite, `Scheduler(...)` with a job, the options of `anarchon.connect`) and the
command line (``next``, ``history``, ``status``, ``backends``) with generated input: every input
either works or raises an `AnarchonError` with a one-line message (the CLI: exits 2 with one
line), never another exception, an "unexpected" exit or a traceback. What works must also keep
the bounds: slots from 0 to the end of year 9999, fencing tokens within a signed 64-bit
integer, durations within their documented maximum.

The normal run takes a modest number of examples per test (derandomized, so a failure repeats);
the long profile (``ANARCHON_HYPOTHESIS_PROFILE=nightly``, ``nox -s input_fuzz``) takes 25
times as many with fresh randomness.
"""

# Look-alike digits and letters are this file's input on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shutil
import string
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import anarchon
from anarchon import (
    MAX_ATTEMPTS,
    AnarchonError,
    ClaimRequest,
    ConfigError,
    Outcome,
    Overlap,
    RunStatus,
    Schedule,
    Scheduler,
    fencing_token,
    new_token,
    to_ms,
)
from anarchon._claims import MAX_SLOT_MS
from anarchon._durations import MAX_DURATION_MS, MAX_LATE_MS, MAX_LEASE_MS
from anarchon._names import MAX_INSTANCE_LENGTH, check_instance, printable_host
from anarchon._runtime.cron import EARLIEST_MS
from anarchon._runtime.settings import default_instance_id
from anarchon.cli import EXIT_STORE_NOT_SET_UP, cli

LONG = os.environ.get("ANARCHON_HYPOTHESIS_PROFILE") == "nightly"
"""The long profile, as the conformance kit names it (``nox -s input_fuzz`` sets it)."""
INT64 = 2**63


def fuzz(examples: int) -> Callable[[Any], Any]:
    """Hypothesis settings: `examples` in the normal run (derandomized), 25 times as many with
    fresh randomness in the long profile."""
    return settings(
        max_examples=examples * 25 if LONG else examples,
        derandomize=not LONG,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def one_line(exc: BaseException) -> str:
    """An anarchon error's message: it must be one non-empty line."""
    assert isinstance(exc, AnarchonError), f"{type(exc).__name__}: {exc}"
    message = str(exc)
    assert message and "\n" not in message and "\r" not in message, repr(message)
    return message


@contextmanager
def refused() -> Iterator[None]:
    """The block either works or raises an `AnarchonError` with a one-line message. Anything
    else propagates and fails the test."""
    try:
        yield
    except AnarchonError as exc:
        one_line(exc)
        event(f"refused: {type(exc).__name__}")


# -- inputs -------------------------------------------------------------------------------------
# Every input has a valid and a bad strategy. Single values are `mostly` valid; keyword arguments
# are all valid, or all valid but one (`keywords`): so what follows valid input runs too (slots,
# claims, stores, commands), and each bad one is refused with the others valid around it.

Field = tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]
"""The valid and the bad values of one input."""


def mostly(valid: st.SearchStrategy[Any], *bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`valid` about three times in four, else one of `bad`. (``one_of(valid, valid, valid,
    bad)`` would not do: `one_of` drops repeated strategies.)"""
    bad_one = st.one_of(*bad)
    return st.integers(0, 3).flatmap(lambda i: bad_one if i == 0 else valid)


def keywords(
    required: dict[str, Field], optional: dict[str, Field]
) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments (some optional ones left out): all valid, or (one time in three) one
    of them bad."""
    every = {**required, **optional}
    valid = st.fixed_dictionaries(
        {k: v for k, (v, _) in required.items()}, optional={k: v for k, (v, _) in optional.items()}
    )

    def spoil(values: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        return st.sampled_from(sorted(every)).flatmap(
            lambda key: every[key][1].map(lambda bad: {**values, key: bad})
        )

    return valid.flatmap(
        lambda values: st.integers(0, 2).flatmap(
            lambda i: spoil(values) if i == 0 else st.just(values)
        )
    )


UNICODE_DIGITS = "⑤٥۵५০੫૫୫௫౫೫൫๕໕༥၅៥᠕５𝟓²½"
"""Characters that `str.isdigit()`, `str.isnumeric()`, `int()` or `float()` take for digits."""
SURROGATES = "\ud800\udcff\udc80"
"""Lone surrogates: undecodable bytes in an environment variable or argument become these."""
ODD = "\x00\n\r\t \u200b\u2028\xa0\x7f\ufeff\x1e-/,*?@:.#LW%'\""
_chars = st.one_of(
    st.sampled_from(UNICODE_DIGITS + SURROGATES + ODD),
    st.characters(min_codepoint=0x20, max_codepoint=0x7E),
    st.characters(),
)
texts = st.text(_chars, max_size=24)
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.builds(object),
)
"""Values of the wrong type for anything."""

# cron expressions and time zones
ascii_digits = st.text(string.digits, min_size=1, max_size=14)
numbers = st.one_of(
    st.integers(-3, 75).map(str),
    ascii_digits,
    st.sampled_from(UNICODE_DIGITS),
    st.text(st.sampled_from(string.digits + UNICODE_DIGITS), min_size=1, max_size=3),
    st.sampled_from(["JAN", "dec", "MON", "sun", "Feb", "xyz", ""]),
)
terms = st.one_of(
    st.sampled_from(["*", "?", "L", "5W", "1#2"]),
    numbers,
    st.tuples(numbers, numbers).map("-".join),
    st.tuples(st.sampled_from(["*", "0", "1-5", "10"]), numbers).map("/".join),
    texts,
)
bad_crons = st.one_of(
    st.lists(st.lists(terms, min_size=1, max_size=3).map(",".join), max_size=7).map(" ".join),
    st.sampled_from(["@reboot", "0 0 31 2 *", "0 0 30 2 *", "", "* * * *"]),
    texts,
)
valid_crons = st.one_of(
    st.tuples(
        st.sampled_from(["", "0 ", "*/10 ", "* ", "30 "]),
        st.sampled_from(["*", "0", "*/5", "0-59/15", "5,35", "59", "?"]),
        st.sampled_from(["*", "2", "9-17", "*/6", "0-23/2", "23", "1,13"]),
        st.sampled_from(["*", "1", "15", "28", "29", "31", "1,15", "?", "*/10"]),
        st.sampled_from(["*", "JAN", "2", "*/3", "DEC", "feb", "4-6"]),
        st.sampled_from(["*", "MON-FRI", "0", "7", "SUN", "6", "1,3"]),
    ).map(lambda f: f[0] + " ".join(f[1:])),
    st.sampled_from(["@daily", "@HOURLY", "@yearly ", "0 0 29 2 *", "0 0 29 2 1"]),
)
crons = mostly(valid_crons, bad_crons)
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Pacific/Kiritimati",
    "Pacific/Pago_Pago",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
]
ZONE: Field = (st.sampled_from(ZONES), st.one_of(texts, st.sampled_from(["", "../etc", "utc "])))
zones = mostly(*ZONE)

# instants, slots and other integers
EDGES = [
    -1,
    0,
    1,
    EARLIEST_MS - 1,
    EARLIEST_MS,
    MAX_SLOT_MS - 86_400_000,
    MAX_SLOT_MS - 60_001,
    MAX_SLOT_MS - 1000,
    MAX_SLOT_MS - 1,
    MAX_SLOT_MS,
    MAX_SLOT_MS + 1,
    INT64,
]
instants = st.one_of(
    st.sampled_from(EDGES),
    st.integers(EARLIEST_MS - 10, MAX_SLOT_MS + 10),
    st.integers(1_700_000_000_000, 1_900_000_000_000),
)
bad_ints = st.one_of(
    st.sampled_from(EDGES),
    st.integers(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([MAX_LEASE_MS + 1, MAX_ATTEMPTS + 1, 0, -1]),
    junk,
    ascii_digits,
)
SLOT: Field = (st.one_of(st.sampled_from([0, MAX_SLOT_MS]), st.integers(0, MAX_SLOT_MS)), bad_ints)
LEASE_MS: Field = (st.integers(1, MAX_LEASE_MS), bad_ints)
MAX_LATE: Field = (st.integers(0, MAX_SLOT_MS), bad_ints)
ATTEMPTS: Field = (st.integers(1, MAX_ATTEMPTS), bad_ints)

# durations
UNITS = ["ms", "s", "m", "h", "d"]
valid_duration_texts = st.lists(
    st.tuples(
        st.integers(0, 10**6).map(str),
        st.sampled_from(["", "", ".5", ".25", ".001"]),
        st.sampled_from(UNITS),
    ).map("".join),
    min_size=1,
    max_size=3,
).map("".join)
bad_duration_texts = st.one_of(
    st.lists(
        st.tuples(
            numbers,
            st.sampled_from(["", ".", ".0000001", ".٥", ".5"]),
            st.sampled_from([*UNITS, "MS", "S", "x", "", " ", "sec", "µs"]),
        ).map("".join),
        min_size=1,
        max_size=3,
    ).map("".join),
    st.sampled_from(["1e3", "9" * 400 + "ms", "1" * 5000, "-5s", "1_000", "0x10", "400d"]),
    texts,
)
duration_texts = mostly(valid_duration_texts, bad_duration_texts)
DURATION: Field = (
    st.one_of(
        st.integers(1, MAX_LEASE_MS),
        st.integers(1, 10**6).map(lambda ms: timedelta(milliseconds=ms)),
        valid_duration_texts,
    ),
    st.one_of(
        st.integers(),
        st.integers(-(10**30), 10**30),
        st.sampled_from([0, MAX_LEASE_MS + 1, MAX_LATE_MS, MAX_LATE_MS + 1, MAX_DURATION_MS + 1]),
        st.timedeltas(),
        bad_duration_texts,
        junk,
    ),
)
durations = mostly(*DURATION)

# names, instance ids, overlap
NAME: Field = (
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,20}", fullmatch=True),
    st.one_of(st.sampled_from(["x" * 100, "x" * 101, "", "a b", "é"]), texts, junk),
)
valid_names = NAME[0]
INSTANCES = [
    "web-1",
    "hôte:1:aaaa",
    "a b",
    " leading",
    "Ω≈ç√∫ 漢字 🙂",
    "x" * MAX_INSTANCE_LENGTH,
    "x" * (MAX_INSTANCE_LENGTH + 1),
    "",
    "a\nb",
    "a\x00b",
    "\ud800",
    "zero\u200bwidth",
]
_printable = st.characters(exclude_categories=["Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"])
INSTANCE: Field = (
    st.one_of(
        st.text(st.one_of(_printable, st.just(" ")), min_size=1, max_size=40),
        st.text(_printable, min_size=MAX_INSTANCE_LENGTH - 2, max_size=MAX_INSTANCE_LENGTH),
    ),
    st.one_of(
        st.sampled_from(INSTANCES),
        texts,
        st.text(st.characters(), min_size=1, max_size=MAX_INSTANCE_LENGTH + 5),
        junk,
    ),
)
OVERLAP: Field = (
    st.sampled_from([*Overlap, "skip", "SKIP", "Allow", " allow "]),
    st.one_of(st.sampled_from(["never", "", "ＳＫＩＰ"]), texts, junk),
)
CATCH_UP: Field = (st.sampled_from(["latest", "ALL", " none"]), st.one_of(texts, junk))


# -- regressions: the inputs issue 21 names -----------------------------------------------------


@pytest.mark.parametrize(
    "cron", ["*/⑤ * * * *", "⑤ * * * *", "٥ * * * *", "0 ⑤ * * *", "*/٥ * * * *"]
)
def test_cron_with_non_ascii_digits_is_a_config_error(cron: str) -> None:
    with pytest.raises(ConfigError, match="field") as info:
        Schedule.parse(cron)
    assert "ASCII digits" in one_line(info.value)


@pytest.mark.parametrize("text", ["⑤", "⑤s", "٥", "٥s", "1.٥s", "५m"])
def test_duration_with_non_ascii_digits_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="is not a duration"):
        to_ms(text, what="lease")


def test_next_after_the_last_minute_of_year_9999_answers_no_slots() -> None:
    result = invoke("next", "* * * * *", "--after", "9999-12-31T23:59")
    assert result.exit_code == 0, result.output
    assert "no slots before the end of year 9999" in result.output
    as_json = invoke("next", "* * * * *", "--after", "9999-12-31T23:58", "--json", "-n", "3")
    assert as_json.exit_code == 0, as_json.output
    assert '"utc": "9999-12-31T23:59:00Z"' in as_json.stdout
    assert as_json.stdout.count('"slot_ms"') == 1


@pytest.mark.parametrize(
    ("after", "tz"),
    [("0999-12-31T00:00", "UTC"), ("0001-01-01T00:00+01:00", "UTC"), ("0001-01-01", "Asia/Tokyo")],
)
def test_next_after_a_time_before_the_year_1000_exits_2(after: str, tz: str) -> None:
    result = invoke("next", "* * * * *", "--after", after, "--tz", tz)
    assert_one_line_error(result, "--after")


@pytest.mark.parametrize("overlap", ["SKIP", "Skip", " skip", Overlap.SKIP])
def test_claim_request_accepts_overlap_in_any_case(overlap: str) -> None:
    assert ClaimRequest(job="j", slot=0, instance="i", overlap=overlap).overlap is Overlap.SKIP


@pytest.mark.parametrize("overlap", ["never", "", None, 1])
def test_claim_request_refuses_other_overlaps_naming_the_field(overlap: object) -> None:
    with pytest.raises(ConfigError, match="overlap must be 'skip'"):
        ClaimRequest(job="j", slot=0, instance="i", overlap=overlap)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("slot", MAX_SLOT_MS + 1),
        ("slot", INT64),
        ("slot", 2**80),
        ("lease_ms", MAX_LEASE_MS + 1),
        ("lease_ms", 10**12),
        ("lease_ms", INT64),
        ("max_late_ms", MAX_SLOT_MS + 1),
        ("max_late_ms", INT64),
    ],
)
def test_claim_request_bounds_slots_and_durations(field: str, value: int) -> None:
    with pytest.raises(ConfigError, match=f"^{field} must be an int from "):
        ClaimRequest(**{"job": "j", "slot": 0, "instance": "i", field: value})  # type: ignore[arg-type]


def test_the_largest_claim_fits_every_store_and_int64(sqlite_url: str) -> None:
    """The bounds are not too tight: both stores take the largest slot, lease, lateness and
    attempts together, and its fencing token fits a signed int64. (Above them, SQLite raised
    OverflowError: `test_claim_request_bounds_slots_and_durations` refuses those now.)"""
    assert fencing_token(MAX_SLOT_MS, MAX_ATTEMPTS) < INT64
    largest = ClaimRequest(
        job="largest",
        slot=MAX_SLOT_MS,
        instance="i",
        lease_ms=MAX_LEASE_MS,
        max_late_ms=MAX_SLOT_MS,
        attempts=MAX_ATTEMPTS,
    )
    for url in ("memory://", sqlite_url):
        claim, records = asyncio.run(claim_and_read(url, largest))
        assert claim.outcome is Outcome.WON, claim
        assert [(r.slot, r.holder) for r in records] == [(MAX_SLOT_MS, "i")]


@pytest.mark.parametrize("instance", [None, b"web-1", "\ud800", "a\nb", "", "x" * 301, 5])
def test_claim_request_refuses_bad_instances(instance: object) -> None:
    """None came back from the store as StoreUnavailable (resent for ever), bytes were written
    and broke `history` with StoreCorrupt."""
    with pytest.raises(ConfigError, match=r"^instance "):
        ClaimRequest(job="j", slot=0, instance=instance)  # type: ignore[arg-type]


@pytest.mark.parametrize("instance", ["\ud800", "a\nb", "tab\there", ""])
def test_scheduler_refuses_a_bad_instance_at_construction(instance: str) -> None:
    """A lone surrogate started a scheduler whose every slot then failed with a traceback."""
    with pytest.raises(ConfigError, match=r"^instance \(from code\)"):
        Scheduler("memory://", instance=instance, environ={})
    with pytest.raises(ConfigError, match=r"^instance \(from environment variable"):
        Scheduler("memory://", environ={"ANARCHON_INSTANCE": instance or "\x1b"})


@pytest.mark.parametrize(
    ("job", "instance"),
    [
        ("accents", "hôte:1:aaaa"),
        ("scripts", "Ω≈ç√∫ 漢字 🙂"),
        ("longest", "x" * MAX_INSTANCE_LENGTH),
    ],
)
def test_valid_unusual_instances_are_written_and_read_back(
    sqlite_url: str, job: str, instance: str
) -> None:
    request = ClaimRequest(job=job, slot=1_800_000_000_000, instance=instance)
    for url in ("memory://", sqlite_url):
        _, records = asyncio.run(claim_and_read(url, request))
        assert [r.holder for r in records] == [instance]


def test_a_default_instance_id_is_valid() -> None:
    check_instance(default_instance_id())


@fuzz(100)
@given(host=st.one_of(st.text(_chars, max_size=300), st.text(st.characters(), max_size=300)))
def test_every_host_name_makes_a_valid_instance_id(host: str) -> None:
    """Also a host name that is not UTF-8 (lone surrogates) or longer than any system allows."""
    instance = f"{printable_host(host)}:{2**64}:abcd"
    assert check_instance(instance) == instance
    if host.isprintable() and len(host) <= 255:
        assert printable_host(host) == host


def test_a_lease_longer_than_a_day_is_refused_at_the_claim_and_the_job() -> None:
    """Item 6: a running row with an enormous lease blocked its job for ever."""
    with pytest.raises(ConfigError, match="lease_ms must be an int from 1 to 86400000"):
        ClaimRequest(job="j", slot=0, instance="i", lease_ms=10**15)
    scheduler = Scheduler("memory://", environ={})
    with pytest.raises(ConfigError, match="job 'j': lease '2d' is longer than 1 day"):
        scheduler.job("* * * * *", name="j", lease="2d")(lambda: None)
    with pytest.raises(ConfigError, match="job 'j': max_late '32d' is longer than 31 days"):
        scheduler.job("* * * * *", name="j", max_late="32d")(lambda: None)
    scheduler.job("* * * * *", name="j", lease="1d", max_late="31d")(lambda: None)


@pytest.mark.parametrize(
    "text",
    ["9" * 400 + "ms", "1" * 5000],
    ids=["a number float() makes infinite", "more digits than int() reads"],
)
def test_absurd_duration_strings_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError):
        to_ms(text)


def test_durations_with_decimals_are_exact() -> None:
    assert to_ms("1.001s") == 1001
    assert to_ms("0.1s") == 100
    assert to_ms(timedelta(microseconds=1_001_000)) == 1001


# -- fuzz: the API ------------------------------------------------------------------------------


@fuzz(300)
@given(cron=crons, tz=zones, after=instants)
def test_schedules_parse_or_refuse_and_slots_stay_in_range(cron: str, tz: str, after: int) -> None:
    with refused():
        schedule = Schedule.parse(cron, tz)
        event("parsed")
        str(schedule), schedule.describe()
        with refused():
            slot = schedule.next_slot(after)
            assert after < slot <= MAX_SLOT_MS
            assert fencing_token(slot, MAX_ATTEMPTS) < INT64
        with refused():
            infos = schedule.upcoming(3, after)
            assert all(after < i.slot_ms <= MAX_SLOT_MS for i in infos)
        with refused():
            for slot in itertools.islice(schedule.slots_between(after, after + 86_400_000), 5):
                assert after < slot <= min(after + 86_400_000, MAX_SLOT_MS)


@fuzz(300)
@given(value=durations, allow_zero=st.booleans(), most=st.sampled_from([None, MAX_LEASE_MS]))
def test_durations_convert_or_refuse(value: object, allow_zero: bool, most: int | None) -> None:
    bounds = {} if most is None else {"most": most}
    with refused():
        ms = to_ms(value, what="lease", allow_zero=allow_zero, **bounds)
        assert isinstance(ms, int)
        event("a duration")
        assert (0 if allow_zero else 1) <= ms <= (most or MAX_DURATION_MS)
        if isinstance(value, int):
            assert ms == value
        if isinstance(value, str):  # only ASCII digits are digits
            assert not any(c in UNICODE_DIGITS for c in value), value


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'claims.db'}"


async def claim_and_read(url: str, request: ClaimRequest) -> tuple[anarchon.Claim, list[Any]]:
    async with anarchon.connect(url) as store:
        claim = await store.claim(request)
        records = await store.history(request.job, 10)
    return claim, [r for r in records if r.slot == request.slot]


@fuzz(150)
@given(
    fields=keywords(
        {"job": NAME, "slot": SLOT, "instance": INSTANCE},
        {
            "token": (st.builds(new_token), st.one_of(texts, junk)),
            "lease_ms": LEASE_MS,
            "max_late_ms": MAX_LATE,
            "overlap": OVERLAP,
            "attempts": ATTEMPTS,
        },
    ),
    data=st.data(),
)
def test_claim_requests_are_valid_or_refused_and_stores_take_every_valid_one(
    sqlite_url: str, fields: dict[str, Any], data: st.DataObject
) -> None:
    try:
        request = ClaimRequest(**fields)
    except AnarchonError as exc:  # the message starts with the field's name
        assert one_line(exc).split()[0] in {*fields, "job"}, exc
        return
    assert 0 <= request.slot <= MAX_SLOT_MS
    assert 0 < request.lease_ms <= MAX_LEASE_MS
    assert 0 <= request.max_late_ms <= MAX_SLOT_MS
    assert fencing_token(request.slot, request.attempts) < INT64
    url = data.draw(st.sampled_from(["memory://", sqlite_url]), label="store")
    try:
        claim, records = asyncio.run(claim_and_read(url, request))
    except ConfigError as exc:  # a claim the store cannot take safely (an early claim, C5)
        one_line(exc)
        return
    assert isinstance(claim, anarchon.Claim)
    event(f"claimed: {claim.outcome}")
    if claim.outcome is Outcome.WON:
        assert [(r.status, r.holder) for r in records] == [(RunStatus.RUNNING, request.instance)]


@fuzz(150)
@given(
    settings_=keywords(
        {},
        {
            "instance": INSTANCE,
            "prefix": NAME,
            "grace": DURATION,
            "clock_skew": DURATION,
            "start_timeout": DURATION,
            "claim_timeout": DURATION,
            "health_port": (st.integers(0, 65535), st.one_of(st.integers(), texts, junk)),
            "catch_up": CATCH_UP,
            "fail_fast": (st.booleans(), st.one_of(texts, junk)),
        },
    ),
    environ=st.dictionaries(
        st.sampled_from(["ANARCHON_INSTANCE", "ANARCHON_GRACE", "ANARCHON_CATCH_UP"]),
        mostly(st.sampled_from(["web-1", "5s", "all"]), texts),
        max_size=2,
    ),
    cron=crons,
    job=keywords(
        {"name": NAME},
        {
            "tz": ZONE,
            "lease": DURATION,
            "max_late": (st.integers(0, MAX_LATE_MS), DURATION[1]),
            "heartbeat": (st.integers(10, 20_000), DURATION[1]),
            "overlap": OVERLAP,
            "attempts": ATTEMPTS,
            "catch_up": CATCH_UP,
        },
    ),
)
def test_schedulers_and_jobs_are_valid_or_refused(
    settings_: dict[str, Any], environ: dict[str, str], cron: str, job: dict[str, Any]
) -> None:
    with in_empty_folder(), refused():
        scheduler = Scheduler("memory://", environ=environ, **settings_)
        ClaimRequest(job="j", slot=0, instance=scheduler.instance)  # its id is valid
        spec = scheduler.add_job(lambda: None, cron, **job)
        assert 0 < spec.heartbeat_ms < spec.lease_ms <= MAX_LEASE_MS
        assert 0 <= spec.max_late_ms <= MAX_LATE_MS
        assert spec.schedule is not None
        ClaimRequest(
            job=spec.name,
            slot=spec.schedule.next_slot(0),
            instance=scheduler.instance,
            lease_ms=spec.lease_ms,
            max_late_ms=spec.max_late_ms,
            overlap=spec.overlap or Overlap.ALLOW,
            attempts=spec.attempts,
        )
        scheduler._check_job(spec)  # what start() checks against the store (T3)
        event("a job")


OPTION_NAMES = ["prefix", "history_limit", "retention_margin_ms", "busy_timeout_ms", "nosuch"]
option_values = st.one_of(mostly(*NAME), durations, ascii_digits, texts, bad_ints)


@fuzz(150)
@given(
    scheme=st.sampled_from(["memory", "sqlite"]),
    keywords=st.dictionaries(st.sampled_from(OPTION_NAMES), option_values, max_size=3),
    query=st.dictionaries(
        st.sampled_from(OPTION_NAMES), st.one_of(ascii_digits, texts), max_size=3
    ),
    open_it=st.booleans(),
)
def test_store_options_are_valid_or_refused(
    scheme: str, keywords: dict[str, object], query: dict[str, str], open_it: bool
) -> None:
    url = "memory://" if scheme == "memory" else f"sqlite:///{FOLDER}/options.db"
    if query:
        url += "?" + "&".join(f"{k}={quote(v, errors='surrogatepass')}" for k, v in query.items())
    with refused():
        store = anarchon.create_store(url, **keywords)
        if open_it:
            asyncio.run(open_and_read(store))
        event("a store")


FOLDER = Path(tempfile.mkdtemp(prefix="anarchon-input-fuzz-"))
"""Where the fuzz writes (SQLite databases), and the working directory of `Scheduler(...)`."""


@pytest.fixture(scope="module", autouse=True)
def _remove_folder() -> Iterator[None]:
    yield
    shutil.rmtree(FOLDER, ignore_errors=True)


async def open_and_read(store: anarchon.ClaimStore) -> None:
    async with store:  # closes it
        await store.open()
        await store.claim(ClaimRequest(job="j", slot=1_800_000_000_000, instance="i"))
        await store.history("j", 5)


@contextmanager
def in_empty_folder() -> Iterator[None]:
    """Settings files are looked up from the working directory: use one with none."""
    before = Path.cwd()
    os.chdir(FOLDER)
    try:
        yield
    finally:
        os.chdir(before)


# -- fuzz: the command line ---------------------------------------------------------------------


def invoke(*args: str) -> Result:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return CliRunner().invoke(cli, list(args), prog_name="anarchon")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def assert_one_line_error(result: Result, *fragments: str) -> None:
    """Exit 2, and one line on stderr: ours (``anarchon: error: ...``), or click's usage error
    (``Error: ...``, maybe after ``Usage: ...``, ``Try ...`` and a blank line); no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = result.stderr.rstrip("\n").split("\n")
    if lines[0].startswith("anarchon: error: "):
        assert len(lines) == 1, result.stderr
    else:  # click's own: "Error: ..." alone, or after "Usage: ..." and "Try ..." (it may
        # quote an argument with a line break in it as is)
        assert lines[0].startswith(("Error: ", "Usage: ")), result.stderr
        assert any(line.startswith("Error: ") for line in lines), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr


def works_or_exits_2(result: Result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        repr(result.exception),
        result.output,
    )
    assert result.exit_code in (0, 2), (result.exit_code, result.output)
    event(f"exit {result.exit_code}")
    if result.exit_code == 2:
        assert_one_line_error(result)


def works_or_exits_2_or_5(result: Result) -> None:
    """As `works_or_exits_2`; a read-only command may also find no anarchon data where it
    looked (``memory://`` of another process, a missing SQLite file): one line, exit 5."""
    if result.exit_code == EXIT_STORE_NOT_SET_UP:
        event("exit 5")
        assert result.stderr.startswith("anarchon: error: "), result.output
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
        return
    works_or_exits_2(result)


years = st.one_of(st.sampled_from([1, 999, 1000, 1969, 1970, 2025, 9999]), st.integers(1, 9999))
iso_times = mostly(
    st.builds(
        lambda y, rest, offset: f"{y:04d}{rest}{offset}",
        mostly(st.integers(1000, 9999), years),
        st.sampled_from(["-12-31T23:59", "-01-01T00:00", "-02-28", "-06-15T12:00:00.999999"]),
        st.sampled_from(["", "Z", "+14:00", "-12:00", "+23:59", "-23:59", "z"]),
    ),
    st.sampled_from(["9999-12-31T23:59", "٢٠٢٥-01-01", "2025-13-01", "2023-02-29", "now", "2d"]),
    texts,
)
cli_args = st.one_of(texts, st.sampled_from(["--json", "-n", "--tz", "--after", "--", "-"]))
extras = mostly(st.just([]), st.lists(cli_args, min_size=1, max_size=2))
counts = st.one_of(
    st.none(), mostly(st.integers(1, 20).map(str), st.integers(-1, 1001).map(str), texts)
)


@fuzz(150)
@given(
    cron=crons,
    tz=st.one_of(st.none(), zones),
    after=st.one_of(st.none(), iso_times),
    count=counts,
    as_json=st.booleans(),
    extra=extras,
)
def test_cli_next_works_or_exits_2(
    cron: str,
    tz: str | None,
    after: str | None,
    count: str | None,
    as_json: bool,
    extra: list[str],
) -> None:
    args = ["next", "--", cron] if cron.startswith("-") else ["next", cron]
    for option, value in (("--tz", tz), ("--after", after), ("-n", count)):
        if value is not None:
            args[1:1] = [option, value]
    if as_json:
        args.insert(1, "--json")
    works_or_exits_2(invoke(*args, *extra))


@pytest.fixture(scope="module")
def history_url() -> str:
    """A SQLite store with runs of two jobs by instances with unusual (valid) ids."""
    url = f"sqlite:///{FOLDER}/history.db"

    async def fill() -> None:
        async with anarchon.connect(url) as store:
            for n, instance in enumerate(INSTANCES[:6]):
                request = ClaimRequest(
                    job="report" if n % 2 else "sync",
                    slot=1_800_000_000_000 + n * 60_000,
                    instance=instance,
                    max_late_ms=MAX_SLOT_MS,
                )
                await store.claim(request)

    asyncio.run(fill())
    return url


urls = mostly(
    st.just("history"),  # the fixture's store
    st.sampled_from(
        [
            "memory://",
            f"sqlite:///{FOLDER}/no-such.db",
            f"sqlite:///{FOLDER}/no-such-folder/x.db",
            "nosuch://host",
            "",
        ]
    ),
)
cli_jobs = mostly(st.sampled_from(["report", "sync", "none"]), valid_names, texts)


@fuzz(120)
@given(
    url=urls,
    job=cli_jobs,
    limit=st.one_of(
        st.none(), mostly(st.integers(1, 50).map(str), st.integers(-1, 100_001).map(str), texts)
    ),
    since=st.one_of(st.none(), iso_times, duration_texts),
    statuses=mostly(
        st.lists(st.sampled_from([*RunStatus, "RUNNING"]), max_size=2),
        st.lists(texts, min_size=1, max_size=2),
    ),
    as_json=st.booleans(),
)
def test_cli_history_works_or_exits_2(
    history_url: str,
    url: str,
    job: str,
    limit: str | None,
    since: str | None,
    statuses: list[str],
    as_json: bool,
) -> None:
    args = ["history", "--", history_url if url == "history" else url, job]
    for option, value in (("--limit", limit), ("--since", since)):
        if value is not None:
            args[1:1] = [option, value]
    for status in statuses:
        args[1:1] = ["--status", str(status)]
    if as_json:
        args.insert(1, "--json")
    works_or_exits_2_or_5(invoke(*args))


@fuzz(100)
@given(
    url=urls,
    jobs=st.lists(cli_jobs, max_size=2),
    interval=st.one_of(st.none(), duration_texts),
    slots=st.one_of(
        st.none(), mostly(st.integers(1, 20).map(str), st.integers(-1, 1001).map(str), texts)
    ),
    window=st.one_of(
        st.none(), mostly(st.integers(1, 200).map(str), st.integers(-1, 100_001).map(str), texts)
    ),
    as_json=st.booleans(),
)
def test_cli_status_works_or_exits_2(
    history_url: str,
    url: str,
    jobs: list[str],
    interval: str | None,
    slots: str | None,
    window: str | None,
    as_json: bool,
) -> None:
    args = ["status", "--json" if as_json else "--once"]
    for option, value in (("--interval", interval), ("--slots", slots), ("--window", window)):
        if value is not None:
            args += [option, value]
    for job in jobs:
        args += ["--job", job]
    works_or_exits_2_or_5(invoke(*args, "--", history_url if url == "history" else url))


@fuzz(30)
@given(extra=extras, as_json=st.booleans())
def test_cli_backends_works_or_exits_2(extra: list[str], as_json: bool) -> None:
    works_or_exits_2(invoke("backends", *(["--json"] if as_json else []), *extra))


def test_the_harness_sees_a_crash() -> None:
    """The checks above fail on a raw exception and on an unexpected exit (they are not
    vacuous): a `ValueError` escapes `refused()`, and exit 1 fails `works_or_exits_2`."""
    with pytest.raises(ValueError), refused():
        raise ValueError("raw")
    crashed = invoke("next", "* * * * *", "--after", "not-a-time")
    assert crashed.exit_code == 2
    crashed.exit_code = 1
    with pytest.raises(AssertionError):
        works_or_exits_2(crashed)
