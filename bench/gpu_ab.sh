#!/bin/bash
# usage: bench/gpu_ab.sh BEFORE_DIR hf|large [ROUNDS]   (on a machine with an NVIDIA GPU; OUT: where results go, default .)
# Recording cost before and after: this tree's bench/gpu.py and the same harness run from BEFORE_DIR, a tracediff
# tree exported for comparison (git archive REF tracediff bench | tar -x -C BEFORE_DIR), alternated ROUNDS times
# (default 3): a shared host's noise moves one process's figures by 15% or more, so one of each proves little.
# hf: HF GPT-2 (plain and DebugMode in the first round); large: the large transformer (plain in the first round).
# Prints each round's medians and, per mode, the median over rounds.
BEFORE=$1; ROUNDS=${3:-3}; OUT=${OUT:-.}
nvidia-smi --query-gpu=name --format=csv,noheader
case $2 in
hf)    args="--workloads hf_gpt2 --modes eager,inductor"; first=plain,tracediff,debugmode ;;
large) args="--workloads transformer --modes eager,inductor"; first=plain,tracediff ;;
*)     echo "usage: $0 BEFORE_DIR hf|large [ROUNDS]" >&2; exit 2 ;;
esac
for round in $(seq 1 "$ROUNDS"); do
  configs=tracediff; [ "$round" = 1 ] && configs=$first
  python3 bench/gpu.py $args --configs $configs --reps 10 --timeout 200 --out $OUT/$2-after-$round.json > /dev/null 2> $OUT/$2-after-$round.err
  python3 $BEFORE/bench/gpu.py $args --configs tracediff --reps 10 --timeout 200 --out $OUT/$2-before-$round.json > /dev/null 2> $OUT/$2-before-$round.err
done
python3 - "$OUT" "$2" "$ROUNDS" <<'PY'
import json, statistics, sys
out, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
runs = {}  # (mode, side, config) -> [median ms per round]
for r in range(1, rounds + 1):
    for side in ("after", "before"):
        try:
            rows = json.load(open(f"{out}/{name}-{side}-{r}.json"))["rows"]
        except (OSError, ValueError, KeyError):
            print(f"round {r} {side}: no result"); continue
        for row in rows:
            for config, value in row.items():
                if isinstance(value, dict) and "median_ms" in value:
                    runs.setdefault((row["mode"], side, config), []).append(value["median_ms"])
                    print(f"round {r} {side:6s} {row['workload']} {row['mode']:8s} {config:9s} "
                          f"{value['median_ms']:7.2f} ms (host {value.get('host_ms', 0):.1f}, peak {value.get('peak_gpu_mib', 0):.0f} MiB)")
for mode in sorted({m for m, _, _ in runs}):
    plain = runs.get((mode, "after", "plain"))
    line = [f"{mode}: median over rounds"]
    for side in ("after", "before"):
        got = runs.get((mode, side, "tracediff"))
        if got:
            med = statistics.median(got)
            line.append(f"{side} {med:.2f} ms" + (f" ({med / plain[0]:.2f}x plain)" if plain else "")
                        + f" [{min(got):.2f}-{max(got):.2f}]")
    if plain:
        line.append(f"plain {plain[0]:.2f} ms")
    print("; ".join(line))
PY
