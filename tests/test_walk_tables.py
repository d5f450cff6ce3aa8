"""What the walk's tables keep of a tensor: packed (dataflow.py's `pack`, `content_of`), as the rules read it."""

from __future__ import annotations

from tracediff.diff.verdict.dataflow import content_of, pack, unpack

_FP = {"sum": 1.5, "l1": 2.5, "l2": 1.25, "max": 1.0, "nan": 0, "inf": 0, "n": 4, "sk": [0.5, -0.25, 0.125]}
_TENSOR = {"a": "self", "id": 7, "v": 3, "b": 2, "dt": "float32", "sh": [2, 2], "dev": "cpu", "fp": _FP}


def test_a_packed_tensor_gives_back_what_the_rules_read_and_drops_the_rest() -> None:
    kept = unpack(pack(_TENSOR))  # type: ignore[arg-type]
    assert kept == {"dt": "float32", "sh": [2, 2], "dev": "cpu", "fp": _FP}
    assert isinstance(kept["sh"], list) and isinstance(kept["fp"]["sk"], list)  # compared with parsed tensors' lists


def test_a_packed_tensor_is_a_new_dict_each_time() -> None:
    packed = pack(_TENSOR)  # type: ignore[arg-type]
    first = unpack(packed)
    first["fp"]["sum"] = 0.0
    assert unpack(packed)["fp"]["sum"] == 1.5


def _content(dt: str = "float32", **fp: float) -> bytes | None:
    return content_of({"dt": dt, "fp": {**_FP, **fp}})  # type: ignore[typeddict-item]


def test_equal_contents_pack_alike_and_other_contents_do_not() -> None:
    assert _content() == _content(sk=[9.0])  # the sketch is order: not content
    assert _content(sum=1e-12, l1=2.5) == _content(sum=1.1e-12, l1=2.5)  # sums to 7 digits of l1
    assert _content(sum=0.0) == _content(sum=-0.0)  # one value, one packing
    assert _content(l1=2.5000001) == _content(l1=2.5000002)
    for other in (_content(dt="bfloat16"), _content(n=5), _content(max=1.0000001), _content(l2=1.26), _content(sum=1.4)):
        assert other is not None and other != _content()


def test_a_content_says_too_little_without_sums_max_or_with_a_nan() -> None:
    assert _content(l1=0.0) is None  # all zeros
    assert _content(l2=float("nan")) is None  # equals nothing, not even itself
    assert content_of({"dt": "float32", "fp": {"sum": 1.0, "l1": 1.0, "l2": 1.0, "n": 1}}) is None  # type: ignore[typeddict-item]
    assert content_of({"dt": "float32"}) is None  # type: ignore[typeddict-item]


def test_a_value_key_is_one_int_per_tensor_and_version_and_reads_back() -> None:
    from tracediff.diff.value_keys import key_of
    from tracediff.diff.verdict.dataflow import ref_to, resolve

    keys = {key_of(i, v) for i in (0, 1, 2, 2**40, 2**70) for v in (None, 0, 1, 2**39)}
    assert len(keys) == 20 and all(isinstance(k, int) for k in keys)
    for i, v in ((0, None), (5, 0), (5, 7), (2**70, 2**39)):
        assert ref_to(key_of(i, v)) == (i, v, None) and resolve(ref_to(key_of(i, v))) == key_of(i, v)
    # Out of range: the tuple itself, equal to no int key.
    for odd in ((-1, 0), (3, -1), (3, 2**40), (None, 1)):
        assert key_of(*odd) == odd and ref_to(key_of(*odd)) == (*odd, None)


def test_a_view_read_resolves_to_its_own_value_or_else_to_its_bases_write() -> None:
    from collections import OrderedDict

    from tracediff.diff.value_keys import key_of
    from tracediff.diff.verdict.dataflow import resolve

    written = OrderedDict({key_of(2, 3): "the base's write"})
    assert resolve((9, 3, 2), written) == key_of(2, 3)  # view 9 of base 2, read at version 3
    written[key_of(9, 3)] = "the view's own"
    assert resolve((9, 3, 2), written) == key_of(9, 3)
    assert resolve((9, None, 2), written) == key_of(9, None)  # no version: no base to share it
