"""The trace file format: one JSON object per line.

Line 1 is the header, then records, then a footer. A file without a footer was
cut off (crash, kill) and still reads back; readers mark it truncated.

Records hold strings and numbers only, never tensors. Keys are short because a
long program writes millions of records.

header  {"t": "header", "schema": 2, "tracediff": ..., "torch": ..., "device": ...,
         "backend": ..., "command": [...], "seed": ..., "fingerprint": [...],
         "settings": {...}, "rank": 0, "world_size": 1, ...}
op      {"t": "op", "i": seq, "op": "aten::cos", "d": depth, "m": module path,
         "src": "model.py:42", "path": "/abs/model.py", "code": "y = torch.cos(x)",
         "in": [tensor...], "out": [tensor...], "bw": true (backward only),
         "g": "graph name" (inside a compiled region only),
         "nfs": true (a scalar argument is NaN/Inf, e.g. masked_fill(mask, -inf))}
region  {"t": "region", "i": seq, "ev": "enter" | "exit", "name": "Net.forward",
         "r": region number, "call": call number, "in"/"out": [tensor...]}
         A region is one call of a function the script passed to torch.compile,
         recorded under every backend (eager included), so both runs share it.
kernel  {"t": "kernel", "i": seq, "name": "cpp_fused_cos_sin_0", "site": "cpp_fused_cos_sin_0:2",
         "g": graph key, "d": depth, "m": module, "src"/"path"/"code": of the last fused op,
         "fuses": [{"node", "op": "aten::sin", "src", "path", "m",
                    "nfs": true (a NaN/Inf literal argument, e.g. full([n, n], -inf))}...] in graph order,
         "in": [buffers read], "out": [buffers written]}
         One launch of an inductor-generated kernel (record/kernels.py).
footer  {"t": "footer", "complete": true, "records": n, "ops": n,
         "kernels": n (generated kernel launches recorded: the run executed inductor's code),
         "compile_calls": n, "error": null | {"type", "message", "traceback"},
         "local_modules": [{"name", "file"}...] (modules imported from the script's folder;
         `tracediff repro` copies them beside the repro),
         "child_processes": n (forked children that ran ops; never recorded, record/fork.py)}

tensor  {"a": arg name, "id": tensor id, "v": version, "dt": "float32",
         "sh": [2, 3], "dev": "cpu", "fp": fingerprint | null}
         `id` is stable for one tensor object within a trace, so an input whose id
         equals an earlier output's id was produced by that op (dataflow).
         "b": base id (views only): the tensor whose storage this view shares (torch's
         `_base`, the root of a chain of views; autograd links them after the view
         op, so the view op's own output has no `b` yet). A view shares its base's version
         counter, so an op writing the view (in place, out=, a kernel) makes value
         `v` of the base too: `v[idx] = x` changes what `base` holds.
         "unread": true (outputs only): a tensor the op wrote in place without returning it (an
         in-place foreach op, AdamW's step on CUDA), listed for dataflow, not fingerprinted (fp null).
         "ft": level (regions and kernels only): a torch.func wrapper (vmap, grad, jvp)
         seen outside the dispatcher, described by the tensor it wraps (record/functorch.py).
"""

from __future__ import annotations

SCHEMA_VERSION = 2

HEADER = "header"
FOOTER = "footer"
OP = "op"
REGION = "region"
KERNEL = "kernel"

RECORD_TYPES = frozenset({OP, REGION, KERNEL})
