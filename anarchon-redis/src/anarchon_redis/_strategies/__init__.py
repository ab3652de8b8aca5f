"""The strategies of the Redis store, one module each, chosen by the ``strategy=`` option:

* ``lease`` (`lease.LeaseStrategy`): L1-L11 in one Lua script, with leases and fencing;
* ``stream-id`` (`stream_id.StreamIdStrategy`): the slot as a stream entry ID;
* ``idmp`` (`idmp.IdmpStrategy`): Redis 8.6's idempotent XADD;
* ``script`` (`script.ScriptStrategy`): a Lua scan of the stream's last `window_ms`.

Every strategy is a `base.Strategy`, built from the options (`strategy_for`) and given the
store's `Link` with each call (the NATS backend's shape too); `scripted.ScriptedStrategy` packs
and sends their claim scripts, `streams.StreamStrategy` is what the three no-lease ones share.
"""

from __future__ import annotations

from .._options import STRATEGIES as NAMES
from .._options import RedisOptions
from .base import Strategy
from .idmp import IdmpStrategy
from .lease import LeaseStrategy
from .script import ScriptStrategy
from .stream_id import StreamIdStrategy

__all__ = [
    "STRATEGIES",
    "IdmpStrategy",
    "LeaseStrategy",
    "ScriptStrategy",
    "Strategy",
    "StreamIdStrategy",
    "strategy_for",
]

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (LeaseStrategy, StreamIdStrategy, IdmpStrategy, ScriptStrategy)
}
"""``strategy=`` value -> the class that implements it."""
assert tuple(STRATEGIES) == NAMES, "every name the options accept has its strategy"


def strategy_for(options: RedisOptions) -> Strategy:
    """The strategy the options name, built from them."""
    return STRATEGIES[options.strategy](options)
