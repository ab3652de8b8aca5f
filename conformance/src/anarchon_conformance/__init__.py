"""anarchon-conformance: the certification kit for anarchon backends.

A backend author implements one `BackendHarness` (or, for a store on a shared server,
`ServerHarness`: URL from the environment, a prefix per test, cleanup) and writes::

    from anarchon_conformance import ConformanceSuite

    class TestMyConformance(ConformanceSuite):
        harness_class = MyHarness

pytest then prints a certificate: each rule passed, failed or not applicable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._harness import DEFAULT_PREFIX, BackendHarness
    from ._rules import RULES, Rule, rule
    from ._server import ServerHarness
    from .certificate import Certificate, RuleStatus
    from .proxy import FaultProxy
    from .suites import (
        ClockTests,
        ConformanceSuite,
        EarlyClaimTests,
        FencingTests,
        IdempotenceTests,
        IsolationTests,
        LeaseTests,
        LedgerTests,
        MembershipTests,
        MemoryRuleTests,
        PauseTests,
        PrepareTests,
        ReadOnlyTests,
        ReconnectTests,
        RetryTests,
        SetupTests,
        SingleWinnerTests,
        StatefulTests,
        TriggerTests,
    )
    from .tls import CertBundle, TLSFront

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_PREFIX",
    "RULES",
    "BackendHarness",
    "CertBundle",
    "Certificate",
    "ClockTests",
    "ConformanceSuite",
    "EarlyClaimTests",
    "FaultProxy",
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
    "Rule",
    "RuleStatus",
    "ServerHarness",
    "SetupTests",
    "SingleWinnerTests",
    "StatefulTests",
    "TLSFront",
    "TriggerTests",
    "__version__",
    "rule",
]

_LAZY = {
    "DEFAULT_PREFIX": "._harness",
    "BackendHarness": "._harness",
    "RULES": "._rules",
    "Rule": "._rules",
    "rule": "._rules",
    "ServerHarness": "._server",
    "Certificate": ".certificate",
    "RuleStatus": ".certificate",
    "FaultProxy": ".proxy",
    "CertBundle": ".tls",
    "TLSFront": ".tls",
    **dict.fromkeys(
        [
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
        ],
        ".suites",
    ),
}


def __getattr__(name: str) -> Any:
    """The suites, the proxy and the certificate are imported on first use (the pytest plugin
    loads this package in every session and must stay light: not even `anarchon` is imported,
    which is why `anarchon.plugins.lazy_exports` is not used here)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'anarchon_conformance' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)
