#!/usr/bin/env bash
# bench-vs-openmpi.sh [BUILD_DIR] [MIN] [MAX] [NPS]: MPI_Allreduce of OpenMPI
# (ob1+vader shared memory, ob1+tcp loopback, ucx with UCX_TLS=sm when the
# ucx pml exists) next to `shardlm bench comm --backend shm|tcp|mpi`, f32 sum,
# same sizes and the same timing (median over iterations of the slowest rank).
# Extra flags for shardlm bench comm: $SHARDLM_BENCH_FLAGS (e.g. --spin-us 1000).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
min=${2:-4}
max=${3:-256M}
nps=${4:-"2 4"}
shardlm="$build/shardlm"
[ -x "$shardlm" ] || { echo "no $shardlm: build it first (scripts/build.sh $build)" >&2; exit 1; }
command -v mpicc >/dev/null && command -v mpirun >/dev/null || { echo "SKIP: mpicc/mpirun not found" >&2; exit 0; }

bench_bin="$build/mpi_allreduce_bench"
mpicc -O2 -Wall -Wextra -o "$bench_bin" bench/mpi_allreduce_bench.c

# Containers: no ptrace-based single copy; root needs explicit permission.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
has_ucx=0
ompi_info 2>/dev/null | grep -q "MCA pml: ucx" && has_ucx=1

for np in $nps; do
  echo "## $np ranks"
  "${mpirun[@]}" -np "$np" --mca pml ob1 --mca btl vader,self "$bench_bin" "$min" "$max" "ob1+vader"
  "${mpirun[@]}" -np "$np" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo "$bench_bin" "$min" "$max" "ob1+tcp loopback"
  if [ "$has_ucx" = 1 ]; then
    UCX_TLS=sm,self "${mpirun[@]}" -x UCX_TLS -np "$np" --mca pml ucx "$bench_bin" "$min" "$max" "ucx sm"
  else
    echo "# pml ucx: not in this OpenMPI build (ompi_info), skipped"
  fi
  for backend in shm tcp; do
    # shellcheck disable=SC2086
    "$shardlm" bench comm --backend "$backend" --np "$np" --min-bytes "$min" --max-bytes "$max" ${SHARDLM_BENCH_FLAGS:-}
  done
  # shellcheck disable=SC2086
  "${mpirun[@]}" -np "$np" "$shardlm" bench comm --backend mpi --min-bytes "$min" --max-bytes "$max" ${SHARDLM_BENCH_FLAGS:-}
done
