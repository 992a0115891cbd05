"""The dispatch generation: a counter bumped whenever something a remembered decision rests on changes.

The process remembers decisions: the config chosen per workload (``choose_config``, the
dispatcher) and the prebound launch per call signature (``fastpath``). ``bump()`` makes every
holder forget them, through the callbacks registered with ``on_bump``; the tuning database bumps
when it gains a record, ``alcop_triton.fastpath.invalidate()`` on request. A computation that read
``current()`` before it started stores its result only if the count is unchanged, so a bump that
races with it cannot leave a stale decision behind. Free of torch, so the database can import it.
"""

from __future__ import annotations

import threading
from typing import Callable

_count = 0
_listeners: list[Callable[[], None]] = []
_lock = threading.Lock()


def current() -> int:
    """The number of bumps so far."""
    return _count


def bump() -> None:
    """Forget every remembered decision (each holder's ``on_bump`` callback runs)."""
    global _count
    with _lock:
        _count += 1
        listeners = list(_listeners)
    for forget in listeners:
        forget()


def on_bump(forget: Callable[[], None]) -> None:
    """Run ``forget`` at every ``bump()``."""
    with _lock:
        _listeners.append(forget)
