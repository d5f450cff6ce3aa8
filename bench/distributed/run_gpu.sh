#!/bin/bash
# usage: bench/distributed/run_gpu.sh tests [PYTEST -k EXPR] | demo [WORD]
#   (on a machine with 2 NVIDIA GPUs, tracediff importable)
# tests: the CUDA tests of distributed runs; demo: the runs recorded in docs/distributed.md (those naming WORD).
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PYTHONPATH:$PWD
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'gpus', torch.cuda.device_count())"
case $1 in
tests)
  python3 -m pytest -m cuda tests/test_distributed_diff.py -v -p no:cacheprovider ${2:+-k "$2"} 2>&1 | tail -25
  ;;
demo)
  filter=$2
  for what in "fixtures/ddp_step.py eager,inductor --fault-rank 1" "bench/distributed/gpt2_ddp.py eager,inductor" \
              "fixtures/ddp_step.py inductor --drift-rank 1" "fixtures/fsdp2_mlp.py eager,inductor --fault-rank 1" \
              "bench/distributed/gpt2_ddp.py eager,inductor --fsdp2"; do
    [[ -n "$filter" && "$what" != *"$filter"* ]] && continue
    set -- $what
    name=$(basename $1 .py)-$(echo $2 | tr , _)${3:+-${3#--}}
    /usr/bin/time -f "%e s" python3 -m tracediff.cli run $1 --backends $2 --nproc-per-node 2 --out-dir /tmp/d-$name -- --device cuda ${@:3} > $OUT/$name.txt 2> /tmp/$name.err
    rc=$?
    echo "== $name rc=$rc $(tail -1 /tmp/$name.err)"
    [ $rc = 1 ] && [ ${1%%/*} = bench ] && tar czf $OUT/$name-traces.tar.gz -C /tmp/d-$name . && ls -la $OUT/$name-traces.tar.gz
    grep -v '^\[' /tmp/$name.err | tail -4
    cat $OUT/$name.txt
    cp /tmp/d-$name/report.json $OUT/$name.json 2>/dev/null
  done
  ;;
esac
