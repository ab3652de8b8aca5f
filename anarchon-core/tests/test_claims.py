from __future__ import annotations

import pytest

from anarchon import ClaimRequest, ConfigError, Overlap, fencing_token, new_token


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"attempts": 0}, "attempts must be an int from 1 to 999, got 0"),
        ({"attempts": 1000}, "attempts must be an int from 1 to 999, got 1000"),
        ({"slot": -1}, "slot must be an int from 0 to 253402300799999"),
        ({"lease_ms": 0}, "lease_ms must be an int from 1 to 86400000 (a day), got 0"),
        ({"max_late_ms": -5}, "max_late_ms must be an int from 0 to 253402300799999"),
        ({"token": "abc"}, "token must be 32 lowercase hex characters"),
        ({"token": "G" * 32}, "token must be 32 lowercase hex characters"),
        ({"overlap": "never"}, "overlap must be 'skip'"),
        ({"job": "a b"}, "job name 'a b' contains ' '"),
    ],
)
def test_claim_requests_are_validated(changes: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"job": "j", "slot": 0, "instance": "i", **changes}
    with pytest.raises(ConfigError) as info:
        ClaimRequest(**fields)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_defaults_and_tokens() -> None:
    request = ClaimRequest(job="j", slot=5, instance="i")
    assert request.overlap is Overlap.SKIP
    assert len(request.token) == 32
    assert new_token() != new_token()


def test_fencing_token_grows_with_slot_then_attempt() -> None:
    tokens = [fencing_token(slot, attempt) for slot in (1000, 2000) for attempt in (1, 2, 999)]
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens)
    assert fencing_token(4_102_444_800_000, 999) < 2**63


def test_L11_sweeps_now_picks_about_one_claim_in_sweep_every() -> None:
    from anarchon._leases import SWEEP_EVERY_MAX, sweep_every, sweeps_now

    assert sweep_every(1) == sweep_every(31) == 1, "small histories are swept by every claim"
    assert sweep_every(256) == 16
    assert sweep_every(1000) == 62
    assert sweep_every(10**6) == SWEEP_EVERY_MAX
    assert all(sweeps_now("job", slot, 31) for slot in range(100))
    slots = range(1_800_000_000_000, 1_800_000_000_000 + 64_000 * 1000, 1000)
    picked = [s for s in slots if sweeps_now("job", s, 1000)]
    assert 64_000 / 62 * 0.8 < len(picked) < 64_000 / 62 * 1.2, len(picked)
    assert picked == [s for s in slots if sweeps_now("job", s, 1000)], "deterministic"
    other = {s for s in slots if sweeps_now("other", s, 1000)}
    assert len(other & set(picked)) < len(picked) / 4, "jobs of one slot do not sweep together"
