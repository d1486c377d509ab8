#!/bin/sh
# Pack ladder v4's finished rows (result.json and config.yaml of each run) into
# docs/experiments/rows/, each archive under 1 MB:
#   the tuning (RUNS_DIR/tuning/FAMILY): the linear map, induction and MQAR one archive per mixer,
#     cellular automata and Dyck one per family, as v4-tuning-*.tar.gz;
#   the ranking (RUNS_DIR/FAMILY): one archive per family and mixer, as v4-rank-*.tar.gz.
# Unpack with
#   for f in docs/experiments/rows/v4-tuning-*.tar.gz docs/experiments/rows/v4-rank-*.tar.gz; do
#       tar xzf "$f" -C runs/v4; done
# Usage: sh docs/experiments/pack-v4-rows.sh RUNS_DIR (the sweep's --out, e.g. runs/v4)
set -eu
runs=$1
rows=$(cd "$(dirname "$0")/rows" && pwd)
cd "$runs"
mixers="transformer mlp_mixer lru mamba gated_deltanet rwkv7 mlstm"
pack() {  # pack ARCHIVE FOLDER [MIXER]: nothing is written when FOLDER holds no finished run
    files=$(find "$2" \( -name result.json -o -name config.yaml \) -path "*$3*" | sed 's|^|./|' | sort)
    [ -n "$files" ] && echo "$files" | tar czf "$rows/$1.tar.gz" -T -
    return 0
}
for family in linear-map induction mqar; do
    task=$(echo "$family" | tr - _)
    for mixer in $mixers; do
        [ -d "tuning/$family" ] && pack "v4-tuning-$family-$mixer" "tuning/$family" "/$task-$mixer-seed"
    done
done
for family in cellular-automata dyck; do
    [ -d "tuning/$family" ] && pack "v4-tuning-$family" "tuning/$family" ""
done
for family in linear-map induction mqar cellular-automata dyck; do
    task=$(echo "$family" | tr - _)
    for mixer in $mixers; do
        [ -d "$family" ] && pack "v4-rank-$family-$mixer" "$family" "/$task-$mixer-seed"
    done
done
find "$rows" -name "v4-tuning-*.tar.gz" -o -name "v4-rank-*.tar.gz" | sort | xargs ls -l
