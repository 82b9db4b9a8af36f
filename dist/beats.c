/*
 * dist/beats.c - what the ranks tell each other about the blocking calls
 * they are in and whether they are alive, for the stall messages (see
 * dist/wait.h, "dist_beats"): the text that names the late ranks from a
 * table of slots, and the relay that carries each rank's own slot to the
 * other nodes in UDP datagrams.
 *
 * Why not MPI: the reader is the monitor thread, which runs while another
 * thread of the process is inside a blocking MPI call (MPI_THREAD_SERIALIZED
 * allows no second caller), and what it asks is whether a peer is stuck
 * inside MPI. The ranks of a node share the table in memory
 * (MPI_Win_allocate_shared at dist_init, then plain atomics); between nodes
 * each rank's monitor sends its own slot, once per beat, to the first rank
 * of every other node, whose monitor writes it into its node's table. A lost
 * datagram costs nothing (the next one says the same, newer); a node that
 * cannot be reached over UDP (a firewall) leaves its ranks unnamed, as
 * before the relay, never named wrongly: a rank nothing was heard from is
 * not in the table.
 *
 * Clocks: every time in a table is this node's monotonic clock. A datagram
 * carries ages ("inside the call for 3.2 s"), which the receiver turns into
 * its own times; the sender's beat is when the receiver's monitor took the
 * datagram (at its next beat: at most a beat late).
 *
 * Cost: one datagram of 64 bytes per rank per other node per beat (a beat
 * is a second, or a quarter of dist.stall_warn_s when that is shorter).
 */
#include "dist/wait.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* "CNTB", and the layout's version: a datagram with other values is not ours. */
#define BEAT_MAGIC 0x434e5442u
#define BEAT_VERSION 1u

/* The datagram: this rank's slot, with ages instead of times. */
typedef struct beat_msg {
    uint32_t magic, version;
    uint64_t token;        /* the job's */
    int64_t rank, node;    /* the sender's job rank and node (the job rank of its node's first rank) */
    int64_t seq, group;    /* as in dist_beat */
    int64_t inside_age_ns; /* how long it has been inside its blocking call; -1: not inside */
    int64_t waiting;       /* as in dist_beat */
} beat_msg;

static int node_of(const dist_beats *t, int r) { return t->node_of ? t->node_of[r] : 0; }

size_t dist_beat_pack(const dist_beats *t, int64_t now_ns, unsigned char *out, size_t cap) {
    if (!t->slots || cap < sizeof(beat_msg)) return 0;
    const dist_beat *b = &t->slots[t->mine];
    int64_t inside = __atomic_load_n(&b->inside_ns, __ATOMIC_ACQUIRE);
    beat_msg m = {
        .magic = BEAT_MAGIC,
        .version = BEAT_VERSION,
        .token = t->token,
        .rank = t->mine,
        .node = node_of(t, t->mine),
        .seq = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE),
        .group = __atomic_load_n(&b->group, __ATOMIC_ACQUIRE),
        .inside_age_ns = inside > 0 ? (now_ns > inside ? now_ns - inside : 0) : -1,
        .waiting = __atomic_load_n(&b->waiting, __ATOMIC_ACQUIRE),
    };
    memcpy(out, &m, sizeof m);
    return sizeof m;
}

int dist_beat_take(const dist_beats *t, const unsigned char *msg, size_t len, int64_t now_ns) {
    beat_msg m;
    if (!t->slots || len != sizeof m) return 0;
    memcpy(&m, msg, sizeof m);
    /* Not ours, or about a rank of this node (whose own slot is the truth),
     * or from a rank whose node is not the one it says: dropped. */
    if (m.magic != BEAT_MAGIC || m.version != BEAT_VERSION || m.token != t->token) return 0;
    if (m.rank < 0 || m.rank >= t->world || m.node != node_of(t, (int)m.rank)) return 0;
    if (node_of(t, (int)m.rank) == node_of(t, t->mine) || m.group < 1 || m.seq < 0) return 0;
    dist_beat *b = &t->slots[m.rank];
    int64_t inside = 0;
    if (m.inside_age_ns >= 0) inside = now_ns - m.inside_age_ns > 0 ? now_ns - m.inside_age_ns : 1;
    __atomic_store_n(&b->seq, m.seq, __ATOMIC_RELEASE);
    __atomic_store_n(&b->inside_ns, inside, __ATOMIC_RELEASE);
    __atomic_store_n(&b->group, m.group, __ATOMIC_RELEASE);
    __atomic_store_n(&b->waiting, m.waiting, __ATOMIC_RELEASE);
    __atomic_store_n(&b->beat_ns, now_ns, __ATOMIC_RELEASE);
    return 1;
}

int dist_beats_describe(const dist_beats *t, char *buf, size_t len, int64_t now_ns, double stale_s, int in_call) {
    if (len) buf[0] = '\0';
    if (!t->slots || len < 2) return 0;
    const dist_beat *me = &t->slots[t->mine];
    int64_t my_seq = __atomic_load_n(&me->seq, __ATOMIC_ACQUIRE);
    int64_t my_group = __atomic_load_n(&me->group, __ATOMIC_ACQUIRE);
    size_t o = 0;
    int named = 0;
    for (int r = 0; r < t->world && o + 1 < len; r++) {
        if (r == t->mine) continue;
        const dist_beat *b = &t->slots[r];
        int64_t group = __atomic_load_n(&b->group, __ATOMIC_ACQUIRE);
        int64_t seq = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE);
        int64_t inside = __atomic_load_n(&b->inside_ns, __ATOMIC_ACQUIRE);
        int64_t beat = __atomic_load_n(&b->beat_ns, __ATOMIC_ACQUIRE);
        int64_t waiting = __atomic_load_n(&b->waiting, __ATOMIC_ACQUIRE);
        /* Unknown (nothing heard yet), or of the other group (servers and
         * workers make different calls). */
        if (group == 0 || beat <= 0 || group != my_group) continue;
        int here = node_of(t, r) == node_of(t, t->mine);
        const char *on = here ? "this node" : t->host && t->host[r] ? t->host[r] : "another node";
        double silent = (double)(now_ns - beat) * 1e-9;
        int n = 0;
        if (silent >= stale_s)
            n = snprintf(buf + o, len - o, "; on %s rank %d has given no sign of life for %.0f s: its process is "
                         "stopped or gone%s", on, r, silent, here ? "" : ", or its node cannot be reached");
        else if (in_call && (seq < my_seq || (seq == my_seq && inside == 0)))
            n = snprintf(buf + o, len - o, "; on %s rank %d has not entered it, its process alive", on, r);
        else if (!in_call && waiting == 0 && inside == 0)
            n = snprintf(buf + o, len - o, "; on %s rank %d is alive and waits in no collective (computing, loading "
                         "data, or stuck outside the collectives)", on, r);
        if (n > 0) {
            named++;
            o += (size_t)n < len - o ? (size_t)n : len - o - 1;
        }
    }
    return named;
}

/* ------------------------------------------------------------ the relay */

int dist_beats_socket(uint16_t *port) {
    *port = 0;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY), .sin_port = 0};
    socklen_t alen = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

int dist_beats_addresses(uint32_t *addr, int max) {
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0) return 0;
    int n = 0;
    for (const struct ifaddrs *i = list; i && n < max; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
        addr[n++] = ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr;
    }
    freeifaddrs(list);
    return n;
}

void dist_beats_send(const dist_beats *t, int64_t now_ns) {
    if (t->fd < 0 || t->n_dest == 0) return;
    unsigned char msg[sizeof(beat_msg)];
    size_t n = dist_beat_pack(t, now_ns, msg, sizeof msg);
    if (n == 0) return;
    /* Best effort: an address that cannot be reached (one of several the
     * other node has) or a full socket buffer loses this beat only. */
    for (int i = 0; i < t->n_dest; i++)
        (void)sendto(t->fd, msg, n, MSG_DONTWAIT, (const struct sockaddr *)&t->dest[i], sizeof t->dest[i]);
}

int dist_beats_drain(const dist_beats *t, int64_t now_ns) {
    if (t->fd < 0 || !t->receiver) return 0;
    int taken = 0;
    unsigned char msg[sizeof(beat_msg) + 1]; /* one more: a longer datagram is not ours */
    for (;;) {
        ssize_t n = recv(t->fd, msg, sizeof msg, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            break; /* EAGAIN: drained */
        }
        taken += dist_beat_take(t, msg, (size_t)n, now_ns);
    }
    return taken;
}
