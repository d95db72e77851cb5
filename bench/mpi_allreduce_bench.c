/* MPI_Allreduce (f32 sum) timed the way `shardlm bench comm` times its own
 * all_reduce, so the two tables compare directly: sizes doubling from
 * argv[1] to argv[2] bytes, iterations = clamp(256 MiB / size, 5, 1000) after
 * max(2, iters/10) warm-up ones, each iteration's time is the slowest rank's,
 * the median is reported; busbw = algbw * 2(n-1)/n as nccl-tests.
 * Build: mpicc -O2 -o mpi_allreduce_bench mpi_allreduce_bench.c */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_size(const char* s) {
  char* end = NULL;
  size_t v = (size_t)strtoull(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  else if (*end == 'M' || *end == 'm') v <<= 20;
  else if (*end == 'G' || *end == 'g') v <<= 30;
  return v;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const size_t lo = argc > 1 ? parse_size(argv[1]) : 4, hi = argc > 2 ? parse_size(argv[2]) : (256u << 20);
  const char* label = argc > 3 ? argv[3] : "openmpi";
  if (rank == 0) {
    printf("# MPI_Allreduce f32 sum (%s), %d ranks; time = median of the slowest rank\n", label, size);
    printf("%12s %12s %10s %11s %11s %7s\n", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
           "#wrong");
  }
  for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
    const size_t count = bytes / 4 ? bytes / 4 : 1;
    size_t iters = (size_t)(256u << 20) / bytes;
    iters = iters < 5 ? 5 : iters > 1000 ? 1000 : iters;
    const size_t warmup = iters / 10 > 2 ? iters / 10 : 2;
    float* buf = malloc(count * sizeof(float));
    double* times = malloc(iters * sizeof(double));
    /* As `shardlm bench comm`: the timed ops sum zeros, so nothing runs
     * between two of them; one op of real data is checked after. */
    for (size_t i = 0; i < count; ++i) buf[i] = 0;
    for (size_t it = 0; it < warmup + iters; ++it) {
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const double t = (MPI_Wtime() - t0) * 1e6;
      if (it >= warmup) times[it - warmup] = t;
    }
    for (size_t i = 0; i < count; ++i) buf[i] = (float)(i % 7) + (float)rank;
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0;
    const float base = (float)size * (float)(size - 1) / 2;
    for (size_t i = 0; i < count; ++i) wrong += buf[i] != (float)size * (float)(i % 7) + base;
    MPI_Allreduce(MPI_IN_PLACE, times, (int)iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    qsort(times, iters, sizeof(double), cmp_double);
    const double us = times[iters / 2];
    const double algbw = (double)(count * 4) / (us * 1e3);
    if (rank == 0)
      printf("%12zu %12zu %10.2f %11.3f %11.3f %7ld\n", count * 4, count, us, algbw,
             algbw * 2.0 * (size - 1) / size, wrong);
    free(buf);
    free(times);
  }
  MPI_Finalize();
  return 0;
}
