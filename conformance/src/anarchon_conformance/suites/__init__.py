"""The suite mixins, one per area, and `ConformanceSuite` combining them.

None is collected by itself (no ``Test`` prefix): a backend author writes
``class TestMyConformance(ConformanceSuite): harness_class = MyHarness``.
"""

from __future__ import annotations

from .clocks import ClockTests
from .early_claims import EarlyClaimTests
from .fencing import FencingTests
from .idempotence import IdempotenceTests
from .isolation import IsolationTests
from .leases import LeaseTests
from .ledger import LedgerTests
from .membership import MembershipTests
from .memory_rule import MemoryRuleTests
from .pause import PauseTests
from .prepare import PrepareTests
from .read_only import ReadOnlyTests
from .reconnect import ReconnectTests
from .retries import RetryTests
from .setup import SetupTests
from .single_winner import SingleWinnerTests
from .stateful import StatefulTests
from .trigger import TriggerTests

__all__ = [
    "ClockTests",
    "ConformanceSuite",
    "EarlyClaimTests",
    "FencingTests",
    "IdempotenceTests",
    "IsolationTests",
    "LeaseTests",
    "LedgerTests",
    "MembershipTests",
    "MemoryRuleTests",
    "PauseTests",
    "PrepareTests",
    "ReadOnlyTests",
    "ReconnectTests",
    "RetryTests",
    "SetupTests",
    "SingleWinnerTests",
    "StatefulTests",
    "TriggerTests",
]


class ConformanceSuite(
    SingleWinnerTests,
    IdempotenceTests,
    EarlyClaimTests,
    LedgerTests,
    LeaseTests,
    FencingTests,
    MemoryRuleTests,
    IsolationTests,
    ReconnectTests,
    StatefulTests,
    ClockTests,
    PrepareTests,
    SetupTests,
    ReadOnlyTests,
    PauseTests,
    TriggerTests,
    RetryTests,
    MembershipTests,
):
    """Every check of the kit. Set ``harness_class``; the certificate counts each rule."""
