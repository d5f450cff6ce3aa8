"""The script tracediff runs in the localization benchmark: one model, one unit of work.

    python target.py MODEL [--device cpu|cuda] [--backend inductor|compile_fx|aot_eager]

`--backend` is what the script compiles with when run by itself (to list the
eligible nodes); under `tracediff run` the backend named there is used. A
fault is planted as bench/localize/faults.py reads it from the environment.
"""

import argparse

import faults
import models

parser = argparse.ArgumentParser()
parser.add_argument("model", choices=models.NAMES)
parser.add_argument("--device", default="cpu")
parser.add_argument("--backend", default="inductor", choices=("inductor", "compile_fx", "aot_eager"))
args = parser.parse_args()

faults.install_for_inductor()
backend = {"inductor": "inductor", "compile_fx": faults.compile_fx_planted, "aot_eager": faults.aot_eager_planted}
results = models.build(args.model, args.device, backend[args.backend])()
faults.save_results(results)
print("checksum:", float(sum(t.double().sum() for t in results)))
