"""Same-input judgement while recording: each call of a compiled graph re-run on its very inputs, uncompiled and
in float64 (the accuracy minifier's test, per call).

After one optimizer step every op's inputs differ between an eager and a compiled run, so rules over two
traces cannot tell a compiler's own error from rounding the program amplified. Re-running each compiled call
in the compiled run's own process, on the same inputs, can: whatever differs there is the compiled code's own.

  graph.py     one compiled graph's calls: references, every output compared, gradients through taps
  prefix.py    the op inside a wrong call: bisection over the graph's prefixes, compiled by the same backend
  backend.py   wraps the run's compile backend so every graph it compiles is judged
  policy.py    which calls are judged: every one, those a time budget allows (the light mode), one window's

The criterion itself (tracediff/judge/measure.py) sits below, shared with the verdict (diff/same_inputs.py).
"""
