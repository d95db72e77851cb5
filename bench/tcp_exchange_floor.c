/* The floor under a 2-rank TCP all_reduce of a small buffer: two processes on
 * one loopback connection (TCP_NODELAY, non-blocking, busy-polling recv) each
 * send N bytes and receive the other's N bytes, with no framing, no matching
 * and no sum. A one-shot all_reduce does exactly this exchange plus a sum; for
 * large N it is the full-duplex rate of a loopback connection.
 * Timed like `shardlm bench comm`: each iteration's time is the slower
 * rank's, the median over iterations is reported, sizes double from argv[1]
 * to argv[2] bytes, iterations as mpi_allreduce_bench.c.
 * Usage: tcp_exchange_floor [MIN] [MAX] [oneway]
 * Build: cc -O2 -o tcp_exchange_floor tcp_exchange_floor.c */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static size_t parse_size(const char* s) {
  char* end = NULL;
  size_t v = (size_t)strtoull(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  else if (*end == 'M' || *end == 'm') v <<= 20;
  return v;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void die(const char* what) {
  fprintf(stderr, "tcp_exchange_floor: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Sends n_out bytes while receiving n_in (a large message would deadlock if
 * both ranks sent first); the socket is non-blocking, so this spins. */
static void exchange(int fd, const char* out, size_t n_out, char* in, size_t n_in) {
  size_t sent = 0, got = 0;
  while (sent < n_out || got < n_in) {
    if (sent < n_out) {
      ssize_t w = send(fd, out + sent, n_out - sent, MSG_NOSIGNAL);
      if (w > 0) sent += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EINTR) die("send");
    }
    if (got < n_in) {
      ssize_t r = recv(fd, in + got, n_in - got, 0);
      if (r > 0) got += (size_t)r;
      else if (r == 0) { errno = ECONNRESET; die("recv"); }
      else if (errno != EAGAIN && errno != EINTR) die("recv");
    }
  }
}

int main(int argc, char** argv) {
  const size_t lo = argc > 1 ? parse_size(argv[1]) : 4, hi = argc > 2 ? parse_size(argv[2]) : (64u << 10);
  /* "oneway": the child only sends and the parent only receives, to compare a
   * loopback connection used one direction at a time with both at once. */
  const int oneway = argc > 3 && strcmp(argv[3], "oneway") == 0;
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {0};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || bind(listener, (struct sockaddr*)&addr, sizeof addr) || listen(listener, 1) ||
      getsockname(listener, (struct sockaddr*)&addr, &len))
    die("listen");
  const pid_t child = fork();
  if (child < 0) die("fork");
  int fd = -1;
  if (child == 0) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr*)&addr, sizeof addr)) die("connect");
  } else if ((fd = accept(listener, NULL, NULL)) < 0) {
    die("accept");
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, O_NONBLOCK);
  if (child != 0) {
    printf("# raw loopback TCP %s, 2 processes; time = median of the slower rank\n",
           oneway ? "one-way transfer (child sends, parent receives)" : "exchange");
    printf("%12s %10s\n", "size(B)", "time(us)");
  }
  for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
    size_t iters = (size_t)(256u << 20) / bytes;
    iters = iters < 5 ? 5 : iters > 1000 ? 1000 : iters;
    const size_t warmup = iters / 10 > 2 ? iters / 10 : 2;
    char* out = malloc(bytes);
    char* in = malloc(bytes);
    double* times = malloc(iters * sizeof(double));
    double* theirs = malloc(iters * sizeof(double));
    if (!out || !in || !times || !theirs) die("malloc");
    memset(out, 1, bytes);
    for (size_t it = 0; it < warmup + iters; ++it) {
      const double t0 = now_us();
      exchange(fd, out, oneway && child != 0 ? 0 : bytes, in, oneway && child == 0 ? 0 : bytes);
      if (it >= warmup) times[it - warmup] = now_us() - t0;
    }
    /* The slower rank defines an iteration: the child reports, the parent prints. */
    exchange(fd, (const char*)times, iters * sizeof(double), (char*)theirs, iters * sizeof(double));
    if (child != 0) {
      for (size_t i = 0; i < iters; ++i)
        if (theirs[i] > times[i]) times[i] = theirs[i];
      qsort(times, iters, sizeof(double), cmp_double);
      printf("%12zu %10.2f\n", bytes, times[iters / 2]);
    }
    free(out), free(in), free(times), free(theirs);
  }
  if (child != 0) waitpid(child, NULL, 0);
  return 0;
}
