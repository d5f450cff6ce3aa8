"""`tracediff repro`: a standalone script for the first divergence.

capture.py  re-runs the reference and keeps the divergent ops' arguments
script.py   renders the standalone script (pure: captured ops -> source text)
writer.py   ties them together: report -> capture run -> repro folder -> check
"""
