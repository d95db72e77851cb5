// Liveness of a job's worker↔worker links. Those are the comm layer's
// sockets, and a long step or a pause between requests is legitimate silence
// on them, so they carry no heartbeats: the kernel probes them instead
// (TCP keep-alive) and gives up on data left unacknowledged, so a network
// split between two workers that both still reach the coordinator fails the
// job within about peer_timeout instead of hanging it. (A stopped process
// still has a live kernel: its control connection's heartbeats catch that.)
#pragma once

namespace shardlm::cluster {

// Keep-alive probes after peer_timeout_s / 3 of silence (at least 1 s), one
// per second, and a connection whose probes or data go unanswered for
// peer_timeout_s is reset (SO_KEEPALIVE, TCP_KEEPIDLE/INTVL/CNT, TCP_USER_TIMEOUT).
void keep_alive(int fd, double peer_timeout_s);

// keep_alive() on every connected TCP socket of this process. A job process
// (cluster/worker_job.h) holds only its own job's connections, and the comm
// layer does not hand its sockets out. Returns how many sockets it set.
int keep_alive_all_connections(double peer_timeout_s);

}  // namespace shardlm::cluster
