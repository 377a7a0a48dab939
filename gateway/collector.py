"""The cyclic garbage collector, paused around start-up's large imports.

Importing the gateway, a chat SDK or the openai SDK makes some hundreds of thousands of objects
that live as long as the process and hold almost no garbage cycles. The collector's passes during
those imports free nothing and cost about a sixth of the time to a first reply; the first full pass
after them would walk them all again for nothing. So they run with the collector off, and what
they made is frozen (`gc.freeze`: kept out of every later pass).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside, and none over what was made inside afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
