"""Schedules: cron fields, aliases, bad input, and daylight saving by rule T7."""

from __future__ import annotations

import functools
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anarchon._errors import ConfigError
from anarchon._runtime.cron import Schedule


def ms(text: str) -> int:
    """Epoch milliseconds of a UTC time written like '2024-03-31T01:00' or '...:30'."""
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp() * 1000)


def iso(slot_ms: int) -> str:
    return datetime.fromtimestamp(slot_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def run(cron: str, tz: str, after: str, n: int) -> list[str]:
    schedule, slots, slot = Schedule.parse(cron, tz), [], ms(after)
    for _ in range(n):
        slot = schedule.next_slot(slot)
        slots.append(iso(slot))
    return slots


# (zone, cron, after (UTC), expected slots (UTC)): the transitions are those of 2024.
# Berlin: gap 02:00 CET -> 03:00 CEST on 31 Mar (01:00Z); fold 03:00 CEST -> 02:00 CET on 27 Oct.
# New York: gap 02:00 EST -> 03:00 EDT on 10 Mar (07:00Z); fold 02:00 EDT -> 01:00 EST on 3 Nov.
# Lord Howe: gap 02:00 -> 02:30 on 6 Oct (5 Oct 15:30Z); fold 02:00 -> 01:30 on 7 Apr (6 Apr 15:00Z).
T7_CASES = {
    "Berlin fixed 02:30 in the gap fires once at 03:00 after it": (
        "Europe/Berlin", "30 2 * * *", "2024-03-30T12:00",
        ["2024-03-31T01:00:00", "2024-04-01T00:30:00"],
    ),
    "Berlin fixed 02:00-02:40 in the gap fire together once at 03:00": (
        "Europe/Berlin", "*/20 2 * * *", "2024-03-30T12:00",
        ["2024-03-31T01:00:00", "2024-04-01T00:00:00"],
    ),
    "Berlin fixed 02:30 in the fold fires once at its first occurrence": (
        "Europe/Berlin", "30 2 * * *", "2024-10-26T12:00",
        ["2024-10-27T00:30:00", "2024-10-28T01:30:00"],
    ),
    "Berlin fixed 02:30 asked from the second pass of the fold does not fire again": (
        "Europe/Berlin", "30 2 * * *", "2024-10-27T01:10",
        ["2024-10-28T01:30:00", "2024-10-29T01:30:00"],
    ),
    "Berlin fixed 03:00 right after the clocks go back still fires": (
        "Europe/Berlin", "* 3 * * *", "2024-10-27T01:00",
        ["2024-10-27T02:00:00", "2024-10-27T02:01:00"],
    ),
    "Berlin 6-field fixed 02:30:15 in the fold fires once": (
        "Europe/Berlin", "15 30 2 * * *", "2024-10-26T12:00",
        ["2024-10-27T00:30:15", "2024-10-28T01:30:15"],
    ),
    "Berlin every 15 minutes fires in both passes of the fold": (
        "Europe/Berlin", "*/15 * * * *", "2024-10-26T23:50",
        ["2024-10-27T00:00:00", "2024-10-27T00:15:00", "2024-10-27T00:30:00",
         "2024-10-27T00:45:00", "2024-10-27T01:00:00", "2024-10-27T01:15:00",
         "2024-10-27T01:30:00", "2024-10-27T01:45:00", "2024-10-27T02:00:00"],
    ),
    "Berlin every 15 minutes has no slot in the gap": (
        "Europe/Berlin", "*/15 * * * *", "2024-03-31T00:30",
        ["2024-03-31T00:45:00", "2024-03-31T01:00:00", "2024-03-31T01:15:00"],
    ),
    "Berlin hourly fires at both 02:00 of the fold": (
        "Europe/Berlin", "0 * * * *", "2024-10-26T23:30",
        ["2024-10-27T00:00:00", "2024-10-27T01:00:00", "2024-10-27T02:00:00"],
    ),
    "Berlin hourly skips 02:00 in the gap": (
        "Europe/Berlin", "0 * * * *", "2024-03-30T23:30",
        ["2024-03-31T00:00:00", "2024-03-31T01:00:00", "2024-03-31T02:00:00"],
    ),
    "Berlin 6-field second 30 fires in both passes of the fold": (
        "Europe/Berlin", "30 * * * * *", "2024-10-27T00:59:00",
        ["2024-10-27T00:59:30", "2024-10-27T01:00:30"],
    ),
    "Berlin 6-field second 30 goes from 01:59:30 to 03:00:30 over the gap": (
        "Europe/Berlin", "30 * * * * *", "2024-03-31T00:59:00",
        ["2024-03-31T00:59:30", "2024-03-31T01:00:30"],
    ),
    "New York fixed 02:30 in the gap fires once at 03:00 after it": (
        "America/New_York", "30 2 * * *", "2024-03-09T12:00",
        ["2024-03-10T07:00:00", "2024-03-11T06:30:00"],
    ),
    "New York fixed 01:30 in the fold fires once at its first occurrence": (
        "America/New_York", "30 1 * * *", "2024-11-02T12:00",
        ["2024-11-03T05:30:00", "2024-11-04T06:30:00"],
    ),
    "New York every 15 minutes fires in both passes of the fold": (
        "America/New_York", "*/15 * * * *", "2024-11-03T04:50",
        ["2024-11-03T05:00:00", "2024-11-03T05:15:00", "2024-11-03T05:30:00",
         "2024-11-03T05:45:00", "2024-11-03T06:00:00", "2024-11-03T06:15:00"],
    ),
    "New York every 15 minutes has no slot in the gap": (
        "America/New_York", "*/15 * * * *", "2024-03-10T06:40",
        ["2024-03-10T06:45:00", "2024-03-10T07:00:00"],
    ),
    "New York hourly fires at both 01:00 of the fold": (
        "America/New_York", "0 * * * *", "2024-11-03T04:30",
        ["2024-11-03T05:00:00", "2024-11-03T06:00:00", "2024-11-03T07:00:00"],
    ),
    "New York hourly skips 02:00 in the gap": (
        "America/New_York", "0 * * * *", "2024-03-10T05:30",
        ["2024-03-10T06:00:00", "2024-03-10T07:00:00"],
    ),
    "New York 6-field second 30 fires in both passes of the fold": (
        "America/New_York", "30 * * * * *", "2024-11-03T05:59:00",
        ["2024-11-03T05:59:30", "2024-11-03T06:00:30"],
    ),
    "New York 6-field second 30 goes from 01:59:30 to 03:00:30 over the gap": (
        "America/New_York", "30 * * * * *", "2024-03-10T06:59:00",
        ["2024-03-10T06:59:30", "2024-03-10T07:00:30"],
    ),
    "Lord Howe fixed 02:15 in the half-hour gap fires once at 02:30 after it": (
        "Australia/Lord_Howe", "15 2 * * *", "2024-10-05T12:00",
        ["2024-10-05T15:30:00", "2024-10-06T15:15:00"],
    ),
    "Lord Howe fixed 01:45 in the half-hour fold fires once at its first occurrence": (
        "Australia/Lord_Howe", "45 1 * * *", "2024-04-06T12:00",
        ["2024-04-06T14:45:00", "2024-04-07T15:15:00"],
    ),
    "Lord Howe every 15 minutes fires in both passes of the fold": (
        "Australia/Lord_Howe", "*/15 * * * *", "2024-04-06T14:20",
        ["2024-04-06T14:30:00", "2024-04-06T14:45:00", "2024-04-06T15:00:00",
         "2024-04-06T15:15:00", "2024-04-06T15:30:00"],
    ),
    "Lord Howe every 15 minutes has no slot in the gap": (
        "Australia/Lord_Howe", "*/15 * * * *", "2024-10-05T15:10",
        ["2024-10-05T15:15:00", "2024-10-05T15:30:00", "2024-10-05T15:45:00"],
    ),
    "Lord Howe hourly has no full hour in the fold, 90 minutes from 01:00 to 02:00": (
        "Australia/Lord_Howe", "0 * * * *", "2024-04-06T13:30",
        ["2024-04-06T14:00:00", "2024-04-06T15:30:00"],
    ),
    "Lord Howe hourly skips 02:00 in the gap, 90 minutes from 01:00 to 03:00": (
        "Australia/Lord_Howe", "0 * * * *", "2024-10-05T14:00",
        ["2024-10-05T14:30:00", "2024-10-05T16:00:00"],
    ),
    "Lord Howe 6-field second 30 fires in both passes of the fold": (
        "Australia/Lord_Howe", "30 * * * * *", "2024-04-06T14:59:00",
        ["2024-04-06T14:59:30", "2024-04-06T15:00:30"],
    ),
    "Lord Howe 6-field second 30 goes from 01:59:30 to 02:30:30 over the gap": (
        "Australia/Lord_Howe", "30 * * * * *", "2024-10-05T15:29:00",
        ["2024-10-05T15:29:30", "2024-10-05T15:30:30"],
    ),
}  # fmt: skip


@pytest.mark.parametrize(("tz", "cron", "after", "expected"), T7_CASES.values(), ids=T7_CASES)
def test_T7(tz: str, cron: str, after: str, expected: list[str]) -> None:
    assert run(cron, tz, after, len(expected)) == expected


FIELD_CASES = {
    "5 fields fire at second 0": ("30 2 * * *", "2024-05-01T00:00", ["2024-05-01T02:30:00"]),
    "6 fields put seconds first": ("10 30 2 * * *", "2024-05-01T00:00", ["2024-05-01T02:30:10"]),
    "steps, ranges and lists": (
        "*/20 5-6,8 * * *",
        "2024-05-01T05:30",
        ["2024-05-01T05:40:00", "2024-05-01T06:00:00", "2024-05-01T06:20:00",
         "2024-05-01T06:40:00", "2024-05-01T08:00:00"],
    ),
    "a value with a step runs to the end of the field": (
        "50/5 * * * *", "2024-05-01T00:00", ["2024-05-01T00:50:00", "2024-05-01T00:55:00"],
    ),
    "month and weekday names": (
        "0 9 * FEB MON-FRI", "2024-05-01T00:00", ["2025-02-03T09:00:00", "2025-02-04T09:00:00"],
    ),
    "day of week 7 is Sunday": (
        "0 0 * * 7", "2024-05-01T00:00", ["2024-05-05T00:00:00", "2024-05-12T00:00:00"],
    ),
    "restricted day of month and day of week fire on either (OR)": (
        "0 0 13 * FRI",
        "2024-09-01T00:00",
        ["2024-09-06T00:00:00", "2024-09-13T00:00:00", "2024-09-20T00:00:00",
         "2024-09-27T00:00:00", "2024-10-04T00:00:00", "2024-10-11T00:00:00",
         "2024-10-13T00:00:00"],
    ),
    "a day of month starting with * combines with day of week by AND": (
        "0 0 */2 * FRI", "2024-09-01T00:00", ["2024-09-13T00:00:00", "2024-09-27T00:00:00"],
    ),
    "29 February waits for a leap year": (
        "0 0 29 2 *", "2024-03-01T00:00", ["2028-02-29T00:00:00", "2032-02-29T00:00:00"],
    ),
    "India has no daylight saving": (
        "30 2 * * 1-7", "2024-05-01T00:00", ["2024-05-01T21:00:00", "2024-05-02T21:00:00"],
    ),
}  # fmt: skip


@pytest.mark.parametrize(("cron", "after", "expected"), FIELD_CASES.values(), ids=FIELD_CASES)
def test_fields(cron: str, after: str, expected: list[str]) -> None:
    tz = "Asia/Kolkata" if cron == "30 2 * * 1-7" else "UTC"
    assert run(cron, tz, after, len(expected)) == expected


ALIAS_CASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}


@pytest.mark.parametrize(("alias", "cron"), ALIAS_CASES.items(), ids=ALIAS_CASES)
def test_alias_means_its_expression(alias: str, cron: str) -> None:
    for after in ("2024-03-15T10:17", "2024-10-26T23:30"):
        assert run(alias.upper(), "Europe/Berlin", after, 3) == run(cron, "Europe/Berlin", after, 3)


HOURS = {"*": True, "*/3": True, "0-23": True, "0-23/2": True, "0/4": True, "?": True,
         "2": False, "0-22": False, "1-23/2": False, "0,12": False, "*/3,5": False}  # fmt: skip


@pytest.mark.parametrize(("hours", "real_time"), HOURS.items(), ids=HOURS)
def test_which_hour_fields_follow_real_time(hours: str, real_time: bool) -> None:
    assert Schedule.parse(f"0 {hours} * * *", "Europe/Berlin").follows_real_time is real_time


def test_next_slot_is_strictly_after_and_whole_seconds() -> None:
    schedule = Schedule.parse("0 * * * *")
    slot = ms("2024-05-01T10:00")
    assert schedule.next_slot(slot - 1) == slot
    assert schedule.next_slot(slot) == slot + 3_600_000
    assert Schedule.parse("* * * * * *").next_slot(slot + 1) == slot + 1000


def test_slots_between_excludes_start_and_includes_end() -> None:
    schedule = Schedule.parse("*/15 * * * *", "Europe/Berlin")
    start, end = ms("2024-05-01T10:00"), ms("2024-05-01T11:00")
    assert list(schedule.slots_between(start, end)) == [
        start + 15 * 60_000,
        start + 30 * 60_000,
        start + 45 * 60_000,
        end,
    ]
    assert list(schedule.slots_between(end, start)) == []


def test_T6_previous_slots_are_those_in_the_window_up_to_now() -> None:
    schedule = Schedule.parse("*/15 * * * *")
    now = ms("2024-05-01T10:30")
    assert schedule.previous_slots(now, 30 * 60_000) == [now - 15 * 60_000, now]
    assert schedule.previous_slots(now - 1, 10 * 60_000) == []
    with pytest.raises(ConfigError, match="negative"):
        schedule.previous_slots(now, -1)


def test_str_and_describe_show_expression_and_zone() -> None:
    schedule = Schedule.parse("30 2 * * *", "Europe/Berlin")
    assert str(schedule) == "30 2 * * * in Europe/Berlin"
    assert "'30 2 * * *' in Europe/Berlin" in schedule.describe()
    assert "once" in schedule.describe()
    assert "real time" in Schedule.parse("@hourly", "Europe/Berlin").describe()
    assert schedule == Schedule.parse("30 2 * * *", "Europe/Berlin")


UPCOMING_CASES = {
    "a fixed time in the gap says it fired after the gap": (
        "30 2 * * *", "2024-03-30T12:00", "02:30 does not exist; fired at 03:00 after the gap",
    ),
    "fixed times in the gap say they fired together": (
        "*/20 2 * * *", "2024-03-30T12:00",
        "02:00 to 02:40 do not exist; fired at 03:00 after the gap",
    ),
    "a fixed time in the fold says the repeat does not fire": (
        "30 2 * * *", "2024-10-26T12:00", "first of two 02:30 (fold); the repeat does not fire",
    ),
    "an hourly job in the fold says first of two": (
        "0 * * * *", "2024-10-26T23:30", "first of two 02:00 (fold)",
    ),
    "an hourly job in the fold's second pass says so": (
        "0 * * * *", "2024-10-27T00:30",
        "second 02:00 (fold): the hour field follows real time",
    ),
    "an hourly job after the gap says what it skipped": (
        "0 * * * *", "2024-03-31T00:30",
        "02:00 does not exist (gap); skipped, the hour field follows real time",
    ),
    "an ordinary slot has no note": ("30 2 * * *", "2024-05-01T00:00", ""),
}  # fmt: skip


@pytest.mark.parametrize(("cron", "after", "note"), UPCOMING_CASES.values(), ids=UPCOMING_CASES)
def test_upcoming_explains_daylight_saving(cron: str, after: str, note: str) -> None:
    [info] = Schedule.parse(cron, "Europe/Berlin").upcoming(1, ms(after))
    assert info.dst_note == note
    assert info.utc == datetime.fromtimestamp(info.slot_ms / 1000, timezone.utc)
    assert info.local.astimezone(timezone.utc) == info.utc
    assert info.local.tzinfo == ZoneInfo("Europe/Berlin")


def test_upcoming_lists_n_increasing_slots() -> None:
    infos = Schedule.parse("*/15 * * * *", "Europe/Berlin").upcoming(9, ms("2024-10-26T23:50"))
    assert [i.slot_ms for i in infos] == sorted({i.slot_ms for i in infos})
    assert [f"{i.local:%H:%M}" for i in infos][3:6] == ["02:45", "02:00", "02:15"]


BAD_CRON = {
    "three fields": ("* * *", "has 3 fields; write 5 fields"),
    "minute 61": ("61 * * * *", "minute field '61' has 61, which is out of range"),
    "seven fields": ("* * * * * * *", "has 7 fields; write 5 fields"),
    "words": ("a b c d e", "minute field 'a' has 'a', which is not a number"),
    "the empty string": ("", "the cron expression is empty; write 5 fields"),
    "only spaces": ("   ", "the cron expression is empty"),
    "hour 24": ("0 24 * * *", "hour field '24' has 24, which is out of range; hour values are 0-23"),
    "a step of zero": ("*/0 * * * *", "minute field '*/0' has step '0'"),
    "a backwards range": ("0 0 * * FRI-MON", "runs backwards"),
    "an unknown month name": ("0 0 1 FOO *", "month field 'FOO' has 'FOO'"),
    "30 February": ("0 0 30 2 *", "never fires"),
    "an unknown alias": ("@reboot", "unknown alias '@reboot'"),
    "an empty list item": ("0, * * * *", "minute field '0,'"),
}  # fmt: skip


@pytest.mark.parametrize(("cron", "message"), BAD_CRON.values(), ids=BAD_CRON)
def test_bad_cron_is_rejected_with_the_field_and_an_example(cron: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"for example|like '30 2") as error:
        Schedule.parse(cron)
    assert message in str(error.value)


@pytest.mark.parametrize("tz", ["Mars/Olympus", "", "../etc/passwd", "/etc/localtime"])
def test_unknown_zone_is_rejected_with_a_hint(tz: str) -> None:
    with pytest.raises(ConfigError, match="use an IANA name like 'Europe/Berlin'") as error:
        Schedule.parse("* * * * *", tz)
    assert repr(tz) in str(error.value)


# --- the property test: an independent brute-force oracle scans UTC minute by minute ---------

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC", "Asia/Kolkata"]
YEAR_2000, YEAR_2036 = ms("2000-01-01T00:00") // 1000, ms("2036-01-01T00:00") // 1000
WINDOW = 6 * 3600


def offset(zone: ZoneInfo, instant: int) -> int:
    delta = datetime.fromtimestamp(instant, zone).utcoffset()
    assert delta is not None
    return int(delta.total_seconds())


@functools.cache
def transitions(tz: str) -> list[int]:
    zone, found = ZoneInfo(tz), []
    for probe in range(YEAR_2000, YEAR_2036, 6 * 3600):
        if offset(zone, probe) != offset(zone, probe + 6 * 3600):
            low, high = probe, probe + 6 * 3600
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (
                    (middle, high) if offset(zone, middle) == offset(zone, low) else (low, middle)
                )
            found.append(high)
    return found


def field(low: int, high: int, favourites: list[int]) -> st.SearchStrategy[tuple[str, set[int]]]:
    value = st.one_of(st.sampled_from(favourites), st.integers(low, high))
    span = high - low + 1
    return st.one_of(
        st.just(("*", set(range(low, high + 1)))),
        st.integers(2, max(2, span // 2)).map(lambda n: (f"*/{n}", set(range(low, high + 1, n)))),
        st.lists(value, min_size=1, max_size=4, unique=True).map(
            lambda vs: (",".join(map(str, vs)), set(vs))
        ),
        st.tuples(value, value, st.integers(1, 5)).map(
            lambda t: (
                f"{min(t[:2])}-{max(t[:2])}/{t[2]}",
                set(range(min(t[:2]), max(t[:2]) + 1, t[2])),
            )
        ),
    )


@st.composite
def expressions(draw: st.DrawFn) -> tuple[str, list[set[int]], bool, bool]:
    seconds = draw(st.one_of(st.none(), field(0, 59, [0, 30]).filter(lambda f: len(f[1]) <= 4)))
    fields = [
        seconds or ("0", {0}),
        draw(field(0, 59, [0, 15, 30, 45])),
        draw(field(0, 23, [0, 1, 2, 3])),
        draw(st.one_of(st.just(("*", set(range(1, 32)))), field(1, 31, [1, 6, 7, 27, 31]))),
        draw(st.one_of(st.just(("*", set(range(1, 13)))), field(1, 12, [3, 4, 10, 11]))),
        draw(st.one_of(st.just(("*", set(range(7)))), field(0, 7, [0, 7]))),
    ]
    text = " ".join(f[0] for f in fields[0 if seconds else 1 :])
    sets = [f[1] for f in fields]
    sets[5] = {d % 7 for d in sets[5]}
    hours = fields[2][0].partition("/")[0]
    real_time = hours in ("*", "0-23")
    any_day = fields[3][0].startswith("*") or fields[5][0].startswith("*")
    return text, sets, real_time, any_day


def matches(wall: datetime, sets: list[set[int]], any_day: bool) -> bool:
    dom, dow = wall.day in sets[3], wall.isoweekday() % 7 in sets[5]
    day = (dom and dow) if any_day else (dom or dow)
    return day and wall.month in sets[4] and wall.hour in sets[2] and wall.minute in sets[1]


def oracle(tz: str, sets: list[set[int]], real_time: bool, any_day: bool, start: int) -> list[int]:
    """Slots in (start, start + WINDOW] by T7, found by scanning every UTC minute."""
    zone, slots = ZoneInfo(tz), set[int]()
    for minute in range(start - start % 60, start + WINDOW + 60, 60):
        local = datetime.fromtimestamp(minute, zone)
        if matches(local.replace(tzinfo=None), sets, any_day) and (real_time or not local.fold):
            slots.update(minute + s for s in sets[0])
        before = offset(zone, minute - 1)
        if not real_time and offset(zone, minute) > before:  # a gap starts here
            gap = range(minute + before, minute + offset(zone, minute), 60)
            if any(matches(datetime.fromtimestamp(w, timezone.utc), sets, any_day) for w in gap):
                slots.add(minute)
    return sorted(s * 1000 for s in slots if start < s <= start + WINDOW)


@st.composite
def starts(draw: st.DrawFn, tz: str) -> int:
    near = transitions(tz)
    if len(near) > 0 and draw(st.booleans()):
        return draw(st.sampled_from(near)) + draw(st.integers(-WINDOW, 3 * 3600))
    return draw(st.integers(YEAR_2000, YEAR_2036))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), expression=expressions(), tz=st.sampled_from(ZONES))
@pytest.mark.slow
def test_T7_slots_match_a_brute_force_scan(
    data: st.DataObject, expression: tuple[str, list[set[int]], bool, bool], tz: str
) -> None:
    text, sets, real_time, any_day = expression
    try:
        schedule = Schedule.parse(text, tz)
    except ConfigError as error:  # only day-of-month days that no chosen month has
        assert "never fires" in str(error)
        longest = {2: 29, 4: 30, 6: 30, 9: 30, 11: 30}
        assert not any(d <= longest.get(m, 31) for m in sets[4] for d in sets[3])
        return
    assert schedule.follows_real_time is real_time
    start = data.draw(starts(tz), label="start") * 1000 + data.draw(st.integers(0, 999))
    zone, slots, slot = ZoneInfo(tz), list[int](), start
    while len(slots) < 40:
        slot = schedule.next_slot(slot)
        assert slot % 1000 == 0 and (not slots or slot > slots[-1])
        slots.append(slot)
        local = datetime.fromtimestamp(slot // 1000, zone)
        on_time = matches(local.replace(tzinfo=None), sets, any_day) and local.second in sets[0]
        if real_time or tz in ("UTC", "Asia/Kolkata"):
            assert on_time
        elif not on_time:  # only the first instant after a gap, standing in for a skipped time
            assert offset(zone, slot // 1000 - 1) < offset(zone, slot // 1000)
        else:
            assert local.fold == 0  # a repeated wall time fires at its first occurrence
        if slot > start + WINDOW * 1000:
            break
    expected = oracle(tz, sets, real_time, any_day, start // 1000)
    within = [s for s in slots if s <= start + WINDOW * 1000]
    assert within == (expected[: len(within)] if within == slots else expected)
