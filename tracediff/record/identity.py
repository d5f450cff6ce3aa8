"""`identity(obj)`: an int naming a live object, as `id(obj)` does, without an audit event where that costs.

`id()` raises the audit event `builtins.id` (PEP 578), and where a Python audit hook is installed every event
calls it. filelock installs one when it is imported on Python 3.12 and later (Hugging Face, Triton and
inductor import it): on the H200 lease (Python 3.12, filelock 3.32) the hook took 5% of a recorded GPT-2
forward's host time, for the dozen `id()` calls the recorder made per op. There `identity` is `object.__hash__`:
any object's address rotated by four bits (CPython's `Py_HashPointer`), whatever its class defines, as unique
among live objects as `id`, and no event. Before 3.12 filelock installs no hook, and `id` costs half as much
(on a small recorded GPT-2 on CPU, `object.__hash__` made recording 2-3% slower).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

identity: Callable[[object], int] = object.__hash__ if sys.version_info >= (3, 12) else id
