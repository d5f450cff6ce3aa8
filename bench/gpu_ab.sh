#!/bin/bash
# usage: bench/gpu_ab.sh BEFORE_DIR hf|large   (on a machine with an NVIDIA GPU; OUT: where results go, default .)
# Recording cost before and after: this tree's bench/gpu.py, then the same harness run from BEFORE_DIR, a
# tracediff tree exported for comparison (git archive REF tracediff | tar -x -C BEFORE_DIR, with bench/ copied in).
# hf: HF GPT-2 (all configs after, tracediff before); large: the large transformer (plain and tracediff).
BEFORE=$1; OUT=${OUT:-.}
nvidia-smi --query-gpu=name --format=csv,noheader
case $2 in
hf)    args="--workloads hf_gpt2 --modes eager,inductor"; after_configs=plain,tracediff,debugmode ;;
large) args="--workloads transformer --modes eager,inductor"; after_configs=plain,tracediff ;;
*)     echo "usage: $0 BEFORE_DIR hf|large" >&2; exit 2 ;;
esac
python3 bench/gpu.py $args --configs $after_configs --reps 10 --timeout 200 --out $OUT/$2-after.json > /dev/null 2> $OUT/$2-after.err
python3 $BEFORE/bench/gpu.py $args --configs tracediff --reps 10 --timeout 200 --out $OUT/$2-before.json > /dev/null 2> $OUT/$2-before.err
cat $OUT/$2-after.md $OUT/$2-before.md
