"""`tracediff repro`: a standalone script for the first divergence.

script.py   renders the standalone script (pure: captured ops -> source text)
writer.py   ties them together: report -> capture run -> repro folder -> check

The capture run's recorder, which keeps the divergent ops' arguments while the reference
is re-run, is tracediff/record/capture.py (the recording side of the layers).
"""
