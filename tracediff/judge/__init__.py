"""How far a compiled call's output is from float64, against how far eager's is: the same-input criterion.

Pure numbers (measure.py): the recording child measures each output (record/judging/), the verdict judges the
measurements with the user's tolerances (diff/same_inputs.py).
"""
