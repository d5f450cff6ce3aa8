"""The fingerprint engine: a few statistics and a sketch per tensor, compared with a tolerance.

- `fingerprint.py`: what a fingerprint is, and torch's way of taking one (the reference for the others).
- `host_stats.py` (`host_stats.c`, compiled on first use): one pass in C over a CPU tensor.
- `device.py`: accelerator tensors without a host sync per op (batched, read late).
- `kernel.py`: the Triton kernel `device.py` launches where Triton is installed.
"""
