"""Same-input judgement: each call of a compiled graph, re-run on its very inputs uncompiled and in float64.

After one optimizer step every op's inputs differ between an eager and a compiled run, so rules over two
traces cannot tell a compiler's own error from rounding the program amplified. Re-running each compiled call,
in the compiled run's own process, on the same inputs (the accuracy minifier's test, per call) can: whatever
differs there is the compiled code's own.

  measure.py   numbers for one output: compiled and eager against float64 (pure; used by child and verdict)
  graph.py     one compiled graph's calls: references, every output compared, gradients through taps
  prefix.py    the op inside a wrong call: bisection over the graph's prefixes, compiled by the same backend
  backend.py   wraps the run's compile backend so every graph it compiles is judged
"""
