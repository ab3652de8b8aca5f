"""Our cron parser against croniter as an independent oracle, in UTC (no DST involved)."""

from __future__ import annotations

from datetime import datetime, timezone

from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from anarchon import Schedule


def field(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    return st.one_of(
        st.just("*"),
        number.map(str),
        # a-a ranges are left out: croniter reads "0-0" as every minute.
        st.tuples(number, number)
        .filter(lambda ab: ab[0] != ab[1])
        .map(lambda ab: f"{min(ab)}-{max(ab)}"),
        st.integers(1, max(1, (high - low) // 2)).map(lambda n: f"*/{n}"),
        st.lists(number, min_size=2, max_size=4, unique=True).map(
            lambda xs: ",".join(map(str, sorted(xs)))
        ),
    )


expressions = st.tuples(
    field(0, 59),
    field(0, 23),
    st.one_of(st.just("*"), st.integers(1, 28).map(str)),
    field(1, 12),
    st.one_of(st.just("*"), st.integers(0, 6).map(str)),
).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(expressions, st.integers(946_684_800, 2_000_000_000))
def test_next_slot_agrees_with_croniter_in_utc(expression: str, start_s: int) -> None:
    schedule = Schedule.parse(expression)
    start = datetime.fromtimestamp(start_s, timezone.utc)
    expected = croniter(expression, start).get_next(datetime)
    assert schedule.next_slot(start_s * 1000) == int(expected.timestamp()) * 1000
