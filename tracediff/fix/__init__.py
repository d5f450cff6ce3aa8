"""`tracediff fix`: the cheapest change to the compile that makes the numbers agree again, verified."""
