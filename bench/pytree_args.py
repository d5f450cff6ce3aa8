"""Why the recorder walks an op's arguments by hand, not with torch.utils._pytree (issue 13).

    python bench/pytree_args.py

Times, per call, the recorder's `_tensor_arguments` and `_output_tensors` against pytree's
`tree_flatten_with_path` (which gives the argument paths the trace names tensors by) and
`tree_leaves`, on `addmm`'s arguments and a two-tensor result.
"""

from __future__ import annotations

import timeit

import torch
from torch.utils._pytree import tree_flatten_with_path, tree_leaves

from tracediff.record.mode import _OpInfo, _output_tensors, _tensor_arguments


def main(calls: int = 20_000) -> None:
    info = _OpInfo.of(torch.ops.aten.addmm.default)
    args, kwargs = (torch.ones(2, 2), torch.ones(2, 2), torch.ones(2, 2)), {"beta": 1}
    result = (torch.ones(2), torch.ones(2))

    def per_call(f: object) -> float:
        return timeit.timeit(f, number=calls) / calls * 1e6  # type: ignore[arg-type]

    rows = {
        "recorder: _tensor_arguments": per_call(lambda: _tensor_arguments(info, args, kwargs)),
        "pytree: tree_flatten_with_path(args, kwargs)": per_call(lambda: tree_flatten_with_path((args, kwargs))),
        "pytree: tree_leaves(args, kwargs)": per_call(lambda: tree_leaves((args, kwargs))),
        "recorder: _output_tensors": per_call(lambda: _output_tensors(result)),
        "pytree: tree_flatten_with_path(result)": per_call(lambda: tree_flatten_with_path(result)),
    }
    for name, us in rows.items():
        print(f"{us:8.2f} us  {name}")


if __name__ == "__main__":
    main()
