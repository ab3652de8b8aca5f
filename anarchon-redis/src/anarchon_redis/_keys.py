"""The keys of one job. All share the hash tag ``{prefix:job}``, so they live in one cluster hash
slot and every script touches a single slot (Redis Cluster safe). The prefix's own keys (the
trigger list, `PrefixKeys`) have the tag ``{prefix:}``: no job has the empty name, and the
key pattern ``~{prefix:*`` of the documented ACL users covers them too."""

from __future__ import annotations

import attrs

__all__ = ["JobKeys", "PrefixKeys"]


@attrs.frozen
class JobKeys:
    """``{prefix:job}:runs`` and friends; see the README's "Keys" section."""

    prefix: str
    job: str

    @property
    def tag(self) -> str:
        return f"{{{self.prefix}:{self.job}}}"

    @property
    def runs(self) -> str:
        """lease: hash, slot -> the run as one line; and the fields ``floor`` (the newest slot
        ever forgotten, L11) and ``n`` (how many runs the job has)."""
        return f"{self.tag}:runs"

    @property
    def slots(self) -> str:
        """lease: sorted set of the job's slots (score = slot), for history and retention."""
        return f"{self.tag}:slots"

    @property
    def leases(self) -> str:
        """lease: sorted set of running slots (score = lease end), for the overlap rule."""
        return f"{self.tag}:leases"

    @property
    def events(self) -> str:
        """lease: stream, one entry per claim, takeover and finish (trimmed to history_limit)."""
        return f"{self.tag}:events"

    @property
    def claims(self) -> str:
        """stream-id, idmp, script: the claim stream, one entry per won slot."""
        return f"{self.tag}:claims"

    @property
    def pause(self) -> str:
        """lease, script: hash, the job's pause (P1): fields ``since``, ``until`` (epoch ms, or
        ``-`` until resumed), ``reason`` and ``by``; read by the claim script."""
        return f"{self.tag}:pause"

    @property
    def idmp_config(self) -> str:
        """idmp: string, the IDMP-DURATION and IDMP-MAXSIZE chosen for ``:claims``."""
        return f"{self.tag}:idmp-config"

    @property
    def ack(self) -> str:
        """Durability (``wait_replicas``, ``wait_aof``): a string written (expiring after a
        second) right after each claim, so that the ``WAIT`` behind it covers the claim even when
        the claim itself wrote nothing (a resend its token recognised). See `_durability`."""
        return f"{self.tag}:ack"

    def lease_keys(self) -> list[str]:
        """The keys the lease script takes for one job, in its order (a claim adds `pause`)."""
        tag = self.tag
        return [f"{tag}:runs", f"{tag}:slots", f"{tag}:leases", f"{tag}:events"]

    def expected_types(self) -> dict[str, str]:
        """Every key of the job with the Redis type anarchon gives it."""
        return {
            self.runs: "hash",
            self.slots: "zset",
            self.leases: "zset",
            self.events: "stream",
            self.claims: "stream",
            self.idmp_config: "string",
            self.pause: "hash",
            self.ack: "string",
        }


@attrs.frozen
class PrefixKeys:
    """The keys of a prefix rather than of one job: the trigger list (X1), written by
    ``control.lua``, and the member list (M1), written by ``members.lua``; each read by one
    call, and no claim script touches them."""

    prefix: str

    @property
    def tag(self) -> str:
        return f"{{{self.prefix}:}}"

    @property
    def triggers(self) -> str:
        """sorted set, one member per trigger, scored by when it was written (epoch ms):
        ``<slot> <job> <n> <by><reason>`` (<n>: the length of <by> in bytes)."""
        return f"{self.tag}:triggers"

    @property
    def trigger_slots(self) -> str:
        """hash, job -> the newest slot a trigger of the job was given (X1: each is new)."""
        return f"{self.tag}:trigger-slots"

    @property
    def members(self) -> str:
        """hash, instance -> ``<started> <seen> <until> <stats JSON>``: the fleet's members
        (M1), written by ``members.lua``, read with HGETALL."""
        return f"{self.tag}:members"

    @property
    def member_ends(self) -> str:
        """sorted set, instance scored by its until (epoch ms): which members ended (M1)."""
        return f"{self.tag}:member-ends"
