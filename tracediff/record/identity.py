"""`identity(obj)`: an int naming a live object, as `id(obj)` does, without an audit event.

`id()` raises the audit event `builtins.id` (PEP 578), and where a Python audit hook is installed every event
calls it. filelock 4 installs one when it is imported on Python 3.12 and later, and torch imports filelock: on
the H200 lease (Python 3.12) the hook took 5% of a recorded GPT-2 forward's host time, for the dozen `id()`
calls the recorder made per op. `object.__hash__` of any object, whatever its class defines, is its address
rotated by four bits (CPython's `Py_HashPointer`), as unique among live objects as `id`, and raises no event.
"""

from __future__ import annotations

from collections.abc import Callable

identity: Callable[[object], int] = object.__hash__
