"""The strategies of `nats://`, one module each, chosen by the ``strategy`` option.

`base.Strategy` states what a strategy declares (its subjects, headers and memory) and what it
shares with the others (claim, claim_many, history, the stream's setup).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Strategy
from .expected_seq import ExpectedSeq
from .msg_id import MsgId

if TYPE_CHECKING:
    from .._options import NATSOptions

__all__ = ["STRATEGIES", "ExpectedSeq", "MsgId", "Strategy", "strategy_for"]

STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (MsgId, ExpectedSeq)}
"""Every strategy by its option value (the names `NATSOptions` accepts)."""


def strategy_for(options: NATSOptions) -> Strategy:
    """The strategy the options name, built from them."""
    return STRATEGIES[options.strategy](options)
