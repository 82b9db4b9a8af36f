/*
 * dist/ring.c - ring allreduce (sum of float buffers over every rank), built
 * on MPI point-to-point messages. What DIST_ALGO_RING runs; tested bit for bit
 * against MPI_Allreduce by tests/mpi_ring.c. And the hierarchical allreduce
 * built from the same steps (DIST_ALGO_HIER, at the end of the file).
 *
 * The algorithm. N ranks sit on a ring: rank r sends only to r+1 and receives
 * only from r-1 (mod N). The buffer of n floats is cut into N segments whose
 * sizes differ by at most one element (when n < N some are empty).
 *
 *   1. Reduce-scatter, N-1 steps. At step k rank r sends segment (r-k) to its
 *      right neighbour and receives segment (r-k-1) from its left one, adding
 *      it into its own copy. A segment travels once around the ring picking up
 *      one rank's contribution per hop, so after N-1 steps rank r holds the
 *      complete sum of segment (r+1).
 *
 *        N = 3, segments a b c, step 0:  r0 sends a0 -> r1 (a0+a1)
 *                                        r1 sends b1 -> r2 (b1+b2)
 *                                        r2 sends c2 -> r0 (c2+c0)
 *                   step 1:  r0 sends c -> r1: r1 holds c0+c1+c2, and so on.
 *
 *   2. Allgather, N-1 steps. At step k rank r sends segment (r+1-k), which is
 *      complete, and receives segment (r-k), which overwrites its copy. After
 *      N-1 steps every rank holds every complete segment.
 *
 * Why it is bandwidth-optimal. Each step every rank sends one segment, n/N
 * floats, and receives one, over its own link to the next rank; all links are
 * busy at once. In 2(N-1) steps each rank sends 2(N-1)/N * n floats. Any
 * allreduce must move at least that much through each rank: its n values must
 * leave it (minus the 1/N it may reduce itself) and the n sums must come back
 * (minus its own 1/N), (N-1)/N * n each way. So the time is about
 * 2(N-1)/N * n * sizeof(float) / link_bandwidth: almost independent of N,
 * unlike sending the whole buffer to one root (N-1 times n through the root's
 * link). The price is 2(N-1) message latencies, which is why small buffers are
 * better served by a tree (MPI_Allreduce picks one for them).
 *
 * Chunking. Each step's segment goes in messages of at most chunk_bytes
 * (default 1 MiB), so a huge buffer never becomes one huge message (MPI counts
 * are int) and the receive buffer stays small. For each chunk the receive is
 * posted before the send (MPI_Irecv, MPI_Isend, then wait for both), so no
 * rank blocks in a send waiting for its neighbour, whatever the world size:
 * every rank posts its chunk-c receive without waiting for anything, so the
 * chunk-c messages of the whole ring can always complete. Sender and receiver
 * agree on the number of chunks because both cut the same segment. The wait
 * is bounded (dist_wait_bounded: yields for a millisecond, then short
 * sleeps between polls, or yields throughout as MPI_Waitall does, as
 * dist.progress says; plus the stall limits),
 * so a neighbour that stops mid-allreduce ends the job instead of hanging it.
 *
 * fp16 (dist_ring_allreduce_f16, for dist.compress = fp16): the same ring
 * over 16-bit halves, so every message is half the size. The partial sums
 * travel as halves; at each reduce-scatter hop the received half and the
 * local half are widened to float, added, and rounded once back to half
 * (common/half.h), the same step MPI's reduction runs with the op of
 * dist_allreduce_sum_f16. With 2 ranks that is exactly the rounded sum; with
 * N ranks each element is rounded N-1 times, in ring order. Sums beyond
 * 65504 become inf.
 *
 * Threads: MPI_THREAD_SERIALIZED; one thread at a time runs this (it owns the
 * static receive buffer while it does).
 */
#include "dist/dist.h"

#include <stdlib.h>

#include "common/check.h"
#include "common/half.h"
#include "dist/wait.h"

#if CNT_HAVE_MPI
#include <mpi.h>

#define RING_DEFAULT_CHUNK_BYTES ((size_t)1 << 20)
/* MPI counts are int; stay well below. */
#define RING_MAX_CHUNK_ELEMS ((size_t)1 << 30)
/* Our own tag, so the ring's messages cannot match anyone else's. */
#define RING_TAG 0x52494e47

/* First element and length of segment s of n elements cut into `world`. */
static size_t seg_start(size_t n, int world, int s) {
    size_t base = n / (size_t)world, extra = n % (size_t)world;
    return (size_t)s * base + ((size_t)s < extra ? (size_t)s : extra);
}

static size_t seg_len(size_t n, int world, int s) {
    return n / (size_t)world + ((size_t)s < n % (size_t)world ? 1 : 0);
}

static int mod(int a, int m) { return ((a % m) + m) % m; }

/* The receive buffer, reused across calls and grown as needed (one chunk). */
static void *ring_tmp = NULL;
static size_t ring_tmp_bytes = 0;

static void *ring_tmp_get(size_t bytes) {
    if (bytes > ring_tmp_bytes) {
        free(ring_tmp);
        ring_tmp = cnt_malloc(bytes);
        ring_tmp_bytes = bytes;
    }
    return ring_tmp;
}

/* The element type of one ring: float (sums in float) or half (sums through
 * float, rounded to half at every hop). */
typedef struct ring_elem {
    size_t size;          /* bytes per element */
    MPI_Datatype type;
    void (*add)(void *acc, const void *in, size_t n); /* acc[i] += in[i] */
} ring_elem;

static void add_float(void *acc, const void *in, size_t n) {
    float *a = acc;
    const float *b = in;
    for (size_t i = 0; i < n; i++) a[i] += b[i];
}

static void add_half(void *acc, const void *in, size_t n) { fp16_add_array(acc, in, n); }

/* Chunks of one ring step in flight at once: while chunk c is added, chunk
 * c+1 is on the wire, so the link does not idle for the add and for the
 * next chunk's rendezvous. */
#define RING_WINDOW 2

/* Elements of a len-element buffer in its chunk that starts at off (0 past
 * its end). */
static size_t piece(size_t len, size_t off, size_t chunk) {
    return off < len ? (len - off < chunk ? len - off : chunk) : 0;
}

/* Chunk c of a step: posts its receive (into tmp, or straight into recv
 * when not adding) and its send. */
static void ring_post(MPI_Comm comm, const ring_elem *el, const char *send, size_t send_len, char *recv,
                      size_t recv_len, char *tmp, size_t chunk, size_t c, int left, int right, MPI_Request req[2]) {
    size_t off = c * chunk, rn = piece(recv_len, off, chunk), sn = piece(send_len, off, chunk);
    req[0] = req[1] = MPI_REQUEST_NULL;
    if (rn)
        DIST_MPI_CHECK(MPI_Irecv(tmp ? tmp : recv + off * el->size, (int)rn, el->type, left, RING_TAG, comm, &req[0]));
    if (sn) DIST_MPI_CHECK(MPI_Isend(send + off * el->size, (int)sn, el->type, right, RING_TAG, comm, &req[1]));
}

/* One ring step: send send_len elements at `send` to the right, receive
 * recv_len elements from the left into `recv`, chunk by chunk (chunk
 * elements, RING_WINDOW of them in flight); add them when `add`, else store
 * them directly (allgather). Messages between two ranks with one tag match
 * in the order they were posted (MPI's non-overtaking rule), so chunk c's
 * receive gets chunk c. */
static void ring_step(MPI_Comm comm, const ring_elem *el, const char *send, size_t send_len, char *recv,
                      size_t recv_len, int add, size_t chunk, int left, int right) {
    size_t len = send_len > recv_len ? send_len : recv_len;
    size_t chunks = (len + chunk - 1) / chunk;
    char *tmp = add ? ring_tmp_get(RING_WINDOW * chunk * el->size) : NULL;
    MPI_Request req[RING_WINDOW][2];
    dist_wait_mode wait = dist_progress_mode() == DIST_PROGRESS_SPIN ? DIST_WAIT_YIELD : DIST_WAIT_PACED;
    for (size_t c = 0; c < chunks && c < RING_WINDOW; c++)
        ring_post(comm, el, send, send_len, recv, recv_len, tmp ? tmp + c * chunk * el->size : NULL, chunk, c, left,
                  right, req[c]);
    for (size_t c = 0; c < chunks; c++) {
        size_t w = c % RING_WINDOW, off = c * chunk;
        char *t = tmp ? tmp + w * chunk * el->size : NULL;
        /* Why wait here: the chunk must have arrived before we add it, and
         * its temporary buffer is reused two chunks on. Neighbours have posted
         * (or will post without waiting) the matching operations. */
        dist_wait_bounded(2, req[w], "the ring allreduce", wait);
        if (add && off < recv_len) el->add(recv + off * el->size, t, piece(recv_len, off, chunk));
        if (c + RING_WINDOW < chunks)
            ring_post(comm, el, send, send_len, recv, recv_len, t, chunk, c + RING_WINDOW, left, right, req[w]);
    }
}

/* Elements per message for chunk_bytes (0: the default). */
static size_t chunk_elems(const ring_elem *el, size_t chunk_bytes) {
    if (chunk_bytes == 0) chunk_bytes = RING_DEFAULT_CHUNK_BYTES;
    size_t chunk = chunk_bytes / el->size;
    if (chunk == 0) chunk = 1;
    return chunk > RING_MAX_CHUNK_ELEMS ? RING_MAX_CHUNK_ELEMS : chunk;
}

/* The ring over the ranks of comm. */
static void ring_allreduce(MPI_Comm comm, const ring_elem *el, void *vbuf, size_t n, size_t chunk_bytes) {
    int world, rank;
    DIST_MPI_CHECK(MPI_Comm_size(comm, &world));
    DIST_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    if (world <= 1 || n == 0) return;
    char *buf = vbuf;
    size_t chunk = chunk_elems(el, chunk_bytes);
    int right = mod(rank + 1, world), left = mod(rank - 1, world);
    size_t es = el->size;

    /* Reduce-scatter: after step k, segment (r-k-1) holds k+2 ranks' sums. */
    for (int k = 0; k < world - 1; k++) {
        int s = mod(rank - k, world), r = mod(rank - k - 1, world);
        ring_step(comm, el, buf + seg_start(n, world, s) * es, seg_len(n, world, s),
                  buf + seg_start(n, world, r) * es, seg_len(n, world, r), 1, chunk, left, right);
    }
    /* Allgather: rank r starts owning the complete segment (r+1). */
    for (int k = 0; k < world - 1; k++) {
        int s = mod(rank + 1 - k, world), r = mod(rank - k, world);
        ring_step(comm, el, buf + seg_start(n, world, s) * es, seg_len(n, world, s),
                  buf + seg_start(n, world, r) * es, seg_len(n, world, r), 0, chunk, left, right);
    }
}

/* ---- hierarchical: within each node to one leader, the ring between the
 * leaders, back within each node ----
 * node: the ranks of dist_comm() sharing this one's node, by rank; leaders:
 * local rank 0 of every node (MPI_COMM_NULL elsewhere). Made by
 * dist_hier_init. */
static MPI_Comm hier_node = MPI_COMM_NULL, hier_leaders = MPI_COMM_NULL;
static int hier_made = 0, hier_nodes = 1, hier_local = 0, hier_local_world = 1;

int dist_hier_init(void) {
    if (hier_made || dist_world() <= 1) return CNT_OK;
    int rank = dist_rank();
    DIST_MPI_CHECK(MPI_Comm_split_type(dist_comm(), MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &hier_node));
    DIST_MPI_CHECK(MPI_Comm_set_errhandler(hier_node, MPI_ERRORS_RETURN));
    DIST_MPI_CHECK(MPI_Comm_rank(hier_node, &hier_local));
    DIST_MPI_CHECK(MPI_Comm_split(dist_comm(), hier_local == 0 ? 0 : MPI_UNDEFINED, rank, &hier_leaders));
    if (hier_leaders != MPI_COMM_NULL) DIST_MPI_CHECK(MPI_Comm_set_errhandler(hier_leaders, MPI_ERRORS_RETURN));
    DIST_MPI_CHECK(MPI_Comm_size(hier_node, &hier_local_world));
    double leaders = hier_leaders != MPI_COMM_NULL;
    dist_allreduce_sum_f64(&leaders, 1); /* bounded */
    hier_nodes = (int)leaders;
    hier_made = 1;
    return CNT_OK;
}

void dist_hier_shape(int *nodes, int *local_world) {
    *nodes = hier_nodes;
    *local_world = hier_local_world;
}

/* Why not MPI_Reduce and MPI_Bcast: they wait inside MPI, spinning and
 * unbounded; these messages wait as the ring's do (dist.progress, the stall
 * limits), the waiting ranks of a node sleep while the leaders' ring runs,
 * and the leader adds its node's buffers in local-rank order, so every rank
 * of every run gets the same bits. */
static void hier_allreduce(const ring_elem *el, void *buf, size_t n, size_t chunk_bytes) {
    CNT_ASSERT(hier_made); /* dist_hier_init, at start-up */
    size_t chunk = chunk_elems(el, chunk_bytes);
    if (hier_local == 0) {
        for (int p = 1; p < hier_local_world; p++) ring_step(hier_node, el, NULL, 0, buf, n, 1, chunk, p, p);
        ring_allreduce(hier_leaders, el, buf, n, chunk_bytes);
        for (int p = 1; p < hier_local_world; p++) ring_step(hier_node, el, buf, n, NULL, 0, 0, chunk, p, p);
    } else {
        ring_step(hier_node, el, buf, n, NULL, 0, 0, chunk, 0, 0);
        ring_step(hier_node, el, NULL, 0, buf, n, 0, chunk, 0, 0);
    }
}

static const ring_elem elem_float = {sizeof(float), MPI_FLOAT, add_float};
static const ring_elem elem_half = {sizeof(uint16_t), MPI_UINT16_T, add_half};

void dist_ring_allreduce(float *buf, size_t n, size_t chunk_bytes) {
    ring_allreduce(dist_comm(), &elem_float, buf, n, chunk_bytes);
}

void dist_ring_allreduce_f16(uint16_t *buf, size_t n, size_t chunk_bytes) {
    ring_allreduce(dist_comm(), &elem_half, buf, n, chunk_bytes);
}

void dist_hier_allreduce(float *buf, size_t n, size_t chunk_bytes) {
    if (dist_world() > 1) hier_allreduce(&elem_float, buf, n, chunk_bytes);
}

void dist_hier_allreduce_f16(uint16_t *buf, size_t n, size_t chunk_bytes) {
    if (dist_world() > 1) hier_allreduce(&elem_half, buf, n, chunk_bytes);
}

#else /* !CNT_HAVE_MPI: a world of one holds the sum already */

int dist_hier_init(void) { return CNT_OK; }

void dist_hier_shape(int *nodes, int *local_world) { *nodes = *local_world = 1; }

void dist_hier_allreduce(float *buf, size_t n, size_t chunk_bytes) {
    (void)buf;
    (void)n;
    (void)chunk_bytes;
}

void dist_hier_allreduce_f16(uint16_t *buf, size_t n, size_t chunk_bytes) {
    (void)buf;
    (void)n;
    (void)chunk_bytes;
}

void dist_ring_allreduce(float *buf, size_t n, size_t chunk_bytes) {
    (void)buf;
    (void)n;
    (void)chunk_bytes;
}

void dist_ring_allreduce_f16(uint16_t *buf, size_t n, size_t chunk_bytes) {
    (void)buf;
    (void)n;
    (void)chunk_bytes;
}

#endif
