#!/bin/sh
# Pack ladder v4's finished rows (result.json and config.yaml of each run) into
# docs/experiments/rows/, each archive under 1 MB: the linear map, induction and MQAR one archive
# per mixer, cellular automata and Dyck one per family. Unpack with
#   for f in docs/experiments/rows/v4-tuning-*.tar.gz; do tar xzf "$f" -C runs/v4; done
# Usage: sh docs/experiments/pack-v4-rows.sh RUNS_DIR (the sweep's --out, e.g. runs/v4)
set -eu
runs=$1
rows=$(cd "$(dirname "$0")/rows" && pwd)
cd "$runs"
pack() {  # pack ARCHIVE FOLDER [MIXER]
    find "$2" \( -name result.json -o -name config.yaml \) -path "*$3*" | sed 's|^|./|' | sort \
        | tar czf "$rows/$1.tar.gz" -T -
}
for family in linear-map induction mqar; do
    task=$(echo "$family" | tr - _)
    for mixer in transformer mlp_mixer lru mamba gated_deltanet rwkv7 mlstm; do
        [ -d "tuning/$family" ] && pack "v4-tuning-$family-$mixer" "tuning/$family" "/$task-$mixer-seed"
    done
done
for family in cellular-automata dyck; do
    [ -d "tuning/$family" ] && pack "v4-tuning-$family" "tuning/$family" ""
done
ls -l "$rows"/v4-tuning-*.tar.gz
