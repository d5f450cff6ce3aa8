"""A value of a tensor, as the diff's tables key it: (tensor id, version), packed in one int."""

from __future__ import annotations

from typing import Any

# One value of one tensor: (tensor id, version), packed in one int (`key_of`); an id or version out of its
# range stays that tuple, which equals no int.
Key = int | tuple[Any, Any]


# A version takes the key's low bits (None: 0, version k: k + 1).
_VERSION_BITS = 40
_VERSION_MASK = (1 << _VERSION_BITS) - 1


def key_of(tensor_id: Any, version: Any) -> Key:
    """The key of `tensor_id`'s value at `version` (None where the tensor has none). One int: the walk's tables
    hold up to 200,000 keys each, and a tuple of two ints took about 100 bytes of each entry, an int about 32."""
    if type(tensor_id) is int and tensor_id >= 0:
        if version is None:
            return tensor_id << _VERSION_BITS
        if type(version) is int and 0 <= version < _VERSION_MASK:
            return tensor_id << _VERSION_BITS | (version + 1)
    return tensor_id, version


def id_and_version(key: Key) -> tuple[Any, Any]:
    """What `key_of` packed."""
    if isinstance(key, tuple):
        return key
    low = key & _VERSION_MASK
    return key >> _VERSION_BITS, low - 1 if low else None
