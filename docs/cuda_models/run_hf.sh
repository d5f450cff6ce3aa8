#!/bin/bash
# usage: run_hf.sh script backend  -> one verdict line
s=$1; b=$2; n=$(basename $s .py)
python3 -m tracediff.cli run $s --backends eager,$b --out-dir $OUTD/$n-$b > $OUTD/$n-$b.txt 2>&1
echo "$n $b rc=$? $(grep -E '^(MATCH|DIVERGED|FAILED)' $OUTD/$n-$b.txt | head -1)"
