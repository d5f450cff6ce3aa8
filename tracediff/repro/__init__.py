"""`tracediff repro`: a standalone script for the first divergence.

script.py   renders the standalone script (pure: captured ops -> source text)
writer.py   ties them together: report -> capture run -> repro folder -> check

capture.py  the capture run's recorder, which keeps the divergent ops' arguments while the reference
            is re-run (it runs in the recording child, tracediff/child.py)
"""
