#!/usr/bin/env bash
# bench-vs-openmpi.sh [BUILD_DIR] [MIN] [MAX] [NPS]: MPI_Allreduce of OpenMPI
# (ob1+vader shared memory, ob1+tcp loopback, ucx with UCX_TLS=sm when the
# ucx pml exists) next to `shardlm bench comm --backend shm|tcp|mpi`, f32 sum,
# same sizes and the same timing (median over iterations of the slowest rank);
# for 2 ranks also the raw loopback TCP exchange (bench/tcp_exchange_floor.c).
# Prints every table, then one comparison table per rank count (time in us,
# then busbw in GB/s). Extra flags for shardlm bench comm:
# $SHARDLM_BENCH_FLAGS (e.g. --spin-us 1000).
# $ROUNDS (default 1): run every implementation that many times, interleaved
# (round 1 of all, then round 2 of all, ...), and report each size's best
# round: on a shared machine the best round is the least disturbed one.
# Last, per rank count, the targets of issue #15 as busbw ratios of the
# best rounds: shm/vader >= 1, tcp/ompi-tcp >= 1, tcp/floor >= 0.8 (2 ranks),
# mpi/vader >= 0.9 (the mpi backend on the ompi-vader column's pml and btls),
# and CLIFF where a shardlm size falls below half of both neighbours.
# The load average is printed with every round.
# $TUNE (default 1): first run `shardlm bench comm --tune` for every backend
# and rank count into a table of this run ($SHARDLM_COMM_TUNING, printed),
# as a user would on a new machine; TUNE=0 measures the built-in defaults
# (or the table already in ~/.cache/shardlm).
# Example (issue #15 sizes): ROUNDS=2 scripts/bench-vs-openmpi.sh build 16K 64M "2 4"
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
min=${2:-4}
max=${3:-256M}
nps=${4:-"2 4"}
rounds=${ROUNDS:-1}
shardlm="$build/shardlm"
[ -x "$shardlm" ] || { echo "no $shardlm: build it first (scripts/build.sh $build)" >&2; exit 1; }
command -v mpicc >/dev/null && command -v mpirun >/dev/null || { echo "SKIP: mpicc/mpirun not found" >&2; exit 0; }

bench_bin="$build/mpi_allreduce_bench"
mpicc -O2 -Wall -Wextra -o "$bench_bin" bench/mpi_allreduce_bench.c
floor_bin="$build/tcp_exchange_floor"
cc -O2 -Wall -Wextra -o "$floor_bin" bench/tcp_exchange_floor.c

# Containers: no ptrace-based single copy; root needs explicit permission.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Ranks are bound to cores, round robin (rank r on core r mod ncores): with
# more ranks than cores and no binding, each launch draws its own placement
# from the kernel scheduler, and 4 ranks on 2 vCPUs ran a 16 KiB all-reduce in
# ~24 or 35-40 us, 1 MiB in ~460 or 500-600 us, by launch, for OpenMPI's
# bench and ours alike (docs/BENCHMARKS.md, twenty-first session).
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to core:overload-allowed)
# The transport of the ompi-vader column, and of the mpi backend's runs: its
# target is a ratio to MPI_Allreduce on the same transport (mpirun's default
# selection also opens the tcp btl, a difference of the launch, not of shardlm).
vader=(--mca pml ob1 --mca btl vader,self)
has_ucx=0
ompi_info 2>/dev/null | grep -q "MCA pml: ucx" && has_ucx=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ "${TUNE:-1}" = 1 ]; then
  export SHARDLM_COMM_TUNING="$out/comm-tuning.txt"
  : >"$SHARDLM_COMM_TUNING"
  for np in $nps; do
    for backend in shm tcp; do
      "$shardlm" bench comm --tune --backend "$backend" --np "$np" --min-bytes "$min" --max-bytes "$max" >/dev/null
    done
    "${mpirun[@]}" -np "$np" "${vader[@]}" "$shardlm" bench comm --autotune --backend mpi --min-bytes "$min" --max-bytes "$max" >/dev/null
  done
  echo "# comm tuning table of this run ($SHARDLM_COMM_TUNING):"
  grep -v '^#' "$SHARDLM_COMM_TUNING" | sed 's/^/#   /'
fi

# run NAME COMMAND...: prints the table and keeps it as $out/NAME.$round.
run() {
  local name=$1
  shift
  "$@" | tee "$out/$name.$round"
}

# The comparison: one row per size, one column per implementation; column
# $2 of awk's output is the time (us), $3 the busbw (GB/s).
summary() {
  local np=$1 names=() name
  for name in ompi-vader ompi-tcp ompi-ucx shardlm-shm shardlm-tcp shardlm-mpi tcp-floor; do
    [ -s "$out/$np-$name.1" ] && names+=("$name")
  done
  for what in "time(us)" "busbw(GB/s)"; do
    echo "## $np ranks, f32 all_reduce, $what"
    for name in "${names[@]}"; do
      # MPI tables: size count time algbw busbw wrong; shardlm: size count
      # type op algo time algbw busbw wrong; the floor: size time (its busbw
      # is that of a 2-rank all_reduce taking this long: size / time).
      # Each round's column, then per size the best round (least time, most busbw).
      for f in "$out/$np-$name".[0-9]*; do
        awk -v w="$what" '/^ *[0-9]/ { t = NF == 6 ? $3 : NF == 2 ? $2 : $6;
                                       b = NF == 6 ? $5 : NF == 2 ? sprintf("%.3f", $1 / ($2 * 1e3)) : $8;
                                       print $1, (w == "time(us)" ? t : b) }' "$f"
      done | awk -v w="$what" '!($1 in best) { order[n++] = $1; best[$1] = $2; next }
                               { if (w == "time(us)" ? $2 < best[$1] : $2 > best[$1]) best[$1] = $2 }
                               END { for (i = 0; i < n; i++) print order[i], best[order[i]] }' > "$out/$np-$name.col"
    done
    printf '%12s' "size(B)"
    for name in "${names[@]}"; do printf ' %12s' "$name"; done
    echo
    # Join the columns on size (every table has the same sizes).
    paste -d' ' $(for name in "${names[@]}"; do echo "$out/$np-$name.col"; done) |
      awk '{ printf "%12s", $1; for (i = 2; i <= NF; i += 2) printf " %12s", $i; print "" }'
  done
  targets "$np"
}

# targets NP: the ratios of the last summary's busbw columns (.col files).
targets() {
  local np=$1
  echo "## $np ranks, targets (busbw ratio, best rounds): shm/vader>=1 tcp/ompi-tcp>=1 tcp/floor>=0.8 mpi/vader>=0.9"
  col() { if [ -s "$out/$np-$1.col" ]; then cat "$out/$np-$1.col"; else awk '{ print $1, "-" }' "$out/$np-ompi-vader.col"; fi; }
  paste -d' ' <(col ompi-vader) <(col ompi-tcp) <(col shardlm-shm) <(col shardlm-tcp) <(col shardlm-mpi) \
    <(col tcp-floor) |
    awk '{ size[NR] = $1; v[NR] = $2; t[NR] = $4; s[NR] = $6; c[NR] = $8; m[NR] = $10; f[NR] = $12 }
         function ratio(a, b, want) { if (a == "-" || b == "-" || b <= 0) return sprintf("%14s", "-");
                                      return sprintf("%8.2f %-5s", a / b, a / b >= want ? "ok" : "MISS") }
         function cliff(x, i) { return i > 1 && i < NR && x[i] != "-" && x[i] < 0.5 * x[i-1] && x[i] < 0.5 * x[i+1] }
         END { printf "%12s %14s %14s %14s %14s %s\n", "size(B)", "shm/vader", "tcp/ompi-tcp", "tcp/floor", "mpi/vader", "cliffs"
               for (i = 1; i <= NR; i++) {
                 cl = (cliff(s, i) ? " shm" : "") (cliff(c, i) ? " tcp" : "") (cliff(m, i) ? " mpi" : "")
                 printf "%12s %s %s %s %s %s\n", size[i], ratio(s[i], v[i], 1), ratio(c[i], t[i], 1),
                        ratio(c[i], f[i], 0.8), ratio(m[i], v[i], 0.9), cl == "" ? "none" : "CLIFF" cl } }'
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs"
for round in $(seq 1 "$rounds"); do
for np in $nps; do
  echo "## $np ranks, round $round, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  run "$np-ompi-vader" "${mpirun[@]}" -np "$np" "${vader[@]}" "$bench_bin" "$min" "$max" "ob1+vader"
  run "$np-ompi-tcp" "${mpirun[@]}" -np "$np" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
    "$bench_bin" "$min" "$max" "ob1+tcp loopback"
  if [ "$has_ucx" = 1 ]; then
    # ompi_info may list a ucx pml that cannot start (no usable UCX transport).
    run "$np-ompi-ucx" env UCX_TLS=sm,self "${mpirun[@]}" -x UCX_TLS -np "$np" --mca pml ucx "$bench_bin" \
      "$min" "$max" "ucx sm" || { echo "# pml ucx failed to start, skipped"; rm -f "$out/$np-ompi-ucx".*; }
  else
    echo "# pml ucx: not in this OpenMPI build (ompi_info), skipped"
  fi
  for backend in shm tcp; do
    # shellcheck disable=SC2086
    run "$np-shardlm-$backend" "$shardlm" bench comm --backend "$backend" --np "$np" --min-bytes "$min" \
      --max-bytes "$max" ${SHARDLM_BENCH_FLAGS:-}
  done
  # shellcheck disable=SC2086
  run "$np-shardlm-mpi" "${mpirun[@]}" -np "$np" "${vader[@]}" "$shardlm" bench comm --backend mpi --min-bytes "$min" \
    --max-bytes "$max" ${SHARDLM_BENCH_FLAGS:-}
  # The raw loopback exchange under a 2-rank all_reduce (no framing, no sum).
  if [ "$np" = 2 ]; then run "$np-tcp-floor" "$floor_bin" "$min" "$max"; fi
done
done
echo
for np in $nps; do summary "$np"; done
