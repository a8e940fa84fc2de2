#!/usr/bin/env bash
# Runs one benchmark command alternately from two builds and compares the figures.
#
#   compare.sh [--runs N] [--keep DIR] BASE_DIR NEW_DIR -- PROGRAM [ARGS...]
#
# Runs BASE_DIR/PROGRAM ARGS, then NEW_DIR/PROGRAM ARGS, N times each (default 3),
# alternating, so that a drift of the machine touches both sides alike. Every benchmark
# of ibis-bench prints a table for people and then one `name value unit` line per figure;
# this script keeps only those lines and prints, per figure name, the median of the base
# runs, the median of the new runs and new/base: a markdown table, then plain
# `name base new ratio` lines for scripts ("-" where a side has no value).
#
# Example (two release builds' target directories, the environment passed through):
#   IPL_SPIN_US=0 examples/bench/scripts/compare.sh --runs 5 /tmp/before/release \
#       target/release -- ipl-bench latency --transport shm --sizes 8,1024 --repeat 5
#
# Exit status: 0 on success; 1 if a run fails (non-zero exit, or no figure lines; its
# output is kept and named); 2 on a usage error.

set -u -o pipefail

prog_name=compare.sh
# A figure line: name value unit. Names may hold '-' (satin-speedup names its figures after
# the application's arguments: satin.integrate_0_100000_1e-6.1proc_s); the human table
# above them pads its columns with several spaces, so none of its lines match.
metric_re='^[a-z][A-Za-z0-9_.-]* [-0-9.eE+]+ [A-Za-z/%]+$'

usage() {
    sed -n '2,18s/^# \{0,1\}//p' "$0"
}

die_usage() {
    echo "$prog_name: $1" >&2
    echo "usage: $prog_name [--runs N] [--keep DIR] BASE_DIR NEW_DIR -- PROGRAM [ARGS...]" >&2
    exit 2
}

runs=3
keep=""
positional=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help)
            usage
            exit 0
            ;;
        --runs)
            [ $# -ge 2 ] || die_usage "--runs needs a value"
            runs=$2
            shift 2
            ;;
        --runs=*)
            runs=${1#--runs=}
            shift
            ;;
        --keep)
            [ $# -ge 2 ] || die_usage "--keep needs a directory"
            keep=$2
            shift 2
            ;;
        --keep=*)
            keep=${1#--keep=}
            shift
            ;;
        --)
            shift
            break
            ;;
        -*)
            die_usage "unknown option $1"
            ;;
        *)
            positional+=("$1")
            shift
            ;;
    esac
done

[[ "$runs" =~ ^[1-9][0-9]*$ ]] || die_usage "--runs must be a positive integer, not '$runs'"
[ ${#positional[@]} -eq 2 ] || die_usage "expected BASE_DIR and NEW_DIR before --"
[ $# -ge 1 ] || die_usage "expected -- PROGRAM [ARGS...] after the two directories"

base_dir=${positional[0]}
new_dir=${positional[1]}
program=$1
shift
args=("$@")

for dir in "$base_dir" "$new_dir"; do
    [ -d "$dir" ] || die_usage "not a directory: $dir"
    [ -x "$dir/$program" ] || die_usage "no executable $program in $dir"
done

if [ -n "$keep" ]; then
    mkdir -p "$keep" || die_usage "cannot create $keep"
    work=$keep
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/compare.XXXXXX") || exit 1
fi
metrics=$work/metrics

fail() {
    echo "$prog_name: $1" >&2
    echo "$prog_name: every run's output is in $work" >&2
    exit 1
}

: >"$metrics"
for ((i = 1; i <= runs; i++)); do
    for side in base new; do
        if [ "$side" = base ]; then dir=$base_dir; else dir=$new_dir; fi
        out=$work/$side.$i.out
        err=$work/$side.$i.err
        echo "$prog_name: run $i/$runs, $side: $dir/$program ${args[*]}" >&2
        "$dir/$program" "${args[@]}" >"$out" 2>"$err"
        status=$?
        if [ $status -ne 0 ]; then
            echo "$prog_name: last lines of its standard error:" >&2
            tail -n 20 "$err" >&2
            fail "run $i of $side ($dir/$program) failed with exit status $status"
        fi
        if ! grep -E "$metric_re" "$out" | sed "s/^/$side /" >>"$metrics"; then
            fail "run $i of $side ($dir/$program) printed no 'name value unit' lines (see $out)"
        fi
    done
done

awk -v runs="$runs" '
function median(list,    n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++) {          # insertion sort, numerically
        t = v[i] + 0
        for (j = i - 1; j >= 1 && v[j] + 0 > t; j--) v[j + 1] = v[j]
        v[j + 1] = t
    }
    if (n % 2) return v[(n + 1) / 2] + 0
    return (v[n / 2] + v[n / 2 + 1]) / 2
}
function shown(side, name,    s) {
    if (!((side, name) in vals)) return "-"
    s = sprintf("%.3f", median(vals[side, name]))
    if (count[side, name] < runs) s = s " (" count[side, name] " of " runs ")"
    return s
}
{
    side = $1; name = $2; value = $3; unit = $4
    if (!(name in units)) { order[++n] = name; units[name] = unit }
    else if (units[name] != unit) units[name] = units[name] "/" unit
    vals[side, name] = ((side, name) in vals) ? vals[side, name] " " value : value
    count[side, name]++
}
END {
    printf "| figure | unit | base (median of %d) | new (median of %d) | new/base |\n", runs, runs
    print "|---|---|---|---|---|"
    for (k = 1; k <= n; k++) {
        name = order[k]
        ratio[name] = "-"
        if (((("base", name) in vals)) && ((("new", name) in vals))) {
            b = median(vals["base", name]); w = median(vals["new", name])
            if (b != 0) ratio[name] = sprintf("%.3f", w / b)
        }
        printf "| %s | %s | %s | %s | %s |\n", name, units[name], shown("base", name), shown("new", name), ratio[name]
    }
    print ""
    for (k = 1; k <= n; k++) {
        name = order[k]
        b = (("base", name) in vals) ? sprintf("%.3f", median(vals["base", name])) : "-"
        w = (("new", name) in vals) ? sprintf("%.3f", median(vals["new", name])) : "-"
        printf "%s %s %s %s\n", name, b, w, ratio[name]
    }
}' "$metrics"

[ -n "$keep" ] || rm -rf "$work"
