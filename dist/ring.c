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
 * posted before the send (MPI_Irecv, MPI_Isend, then test both until done), so no
 * rank blocks in a send waiting for its neighbour, whatever the world size:
 * every rank posts its chunk-c receive without waiting for anything, so the
 * chunk-c messages of the whole ring can always complete. Sender and receiver
 * agree on the number of chunks because both cut the same segment. The wait
 * is bounded (dist_wait_polled: yields for a millisecond, then short
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
 * In flight together (dist_iallreduce, for dist.buckets_in_flight): each sum
 * is an op, a list of parts (one ring step; a leader's receive from one
 * local rank) that moves chunk by chunk when polled and never waits, so one
 * thread keeps several sums moving. The blocking calls run one op to its
 * end. An op adds in the same order whatever else moves; each slot has its
 * own tag, so two ops' chunks between the same ranks never match each other.
 *
 * Threads: MPI_THREAD_SERIALIZED; one thread at a time runs this (the
 * blocking calls share one op).
 */
#include "dist/dist.h"

#include <stdlib.h>

#include "common/check.h"
#include "common/half.h"
#include "dist/wait.h"

#if CNT_HAVE_MPI
#include <mpi.h>

/* Why 1 MiB: at each of the 2(N-1) step boundaries the ring's pipeline
 * drains and refills (the next step's first chunk leaves once the last one
 * of this step has arrived), which costs about one chunk's time on the
 * wire, so smaller chunks lose less there; but every chunk also costs the
 * communication thread a few wake-ups (MPI's rendezvous over TCP moves
 * only while it is polled), and when other work holds the cores each
 * wake-up waits for one. On 3-4 namespace hosts (tools/bench_allreduce,
 * 64 MiB, 3 rounds alternated, bus bandwidth; 2026-12-08, 2-core AMD EPYC
 * VM), 256 KiB against 1 MiB: 1 Gbit/s 0.119 against 0.114-0.116 GB/s
 * quiet, 0.112-0.113 against 0.112-0.113 with two busy loops on the cores;
 * 5 Gbit/s 0.495-0.560 against 0.578-0.588 quiet and 0.176-0.223 against
 * 0.366-0.371 loaded. 256 KiB was the default from 2026-11-28 (measured at
 * 1 Gbit/s only, quiet: 0.115-0.116 against 0.105-0.113 at 4 hosts); a
 * window of 4 chunks instead of 2 was worse there (0.101-0.111); one
 * node's shared memory did not change beyond its noise (docs/scaling.md,
 * "Ring bus bandwidth"). */
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

static const ring_elem elem_float = {sizeof(float), MPI_FLOAT, add_float};
static const ring_elem elem_half = {sizeof(uint16_t), MPI_UINT16_T, add_half};

/* Chunks of one ring step in flight at once: while chunk c is added, chunk
 * c+1 is on the wire, so the link does not idle for the add and for the
 * next chunk's rendezvous. */
#define RING_WINDOW 2

/* Elements of a len-element buffer in its chunk that starts at off (0 past
 * its end). */
static size_t piece(size_t len, size_t off, size_t chunk) {
    return off < len ? (len - off < chunk ? len - off : chunk) : 0;
}

/* Elements per message for chunk_bytes (0: the default). */
static size_t chunk_elems(const ring_elem *el, size_t chunk_bytes) {
    if (chunk_bytes == 0) chunk_bytes = RING_DEFAULT_CHUNK_BYTES;
    size_t chunk = chunk_bytes / el->size;
    if (chunk == 0) chunk = 1;
    return chunk > RING_MAX_CHUNK_ELEMS ? RING_MAX_CHUNK_ELEMS : chunk;
}

/* One step of an allreduce: send send_len elements at `send` to `right`,
 * receive recv_len elements from `left` into `recv`, chunk by chunk, adding
 * them when `add` (reduce-scatter; a leader gathering its node) or storing
 * them (allgather; the sums going back to a node). Either length may be 0. */
typedef struct ring_part {
    MPI_Comm comm;
    const char *send;
    size_t send_len;
    char *recv;
    size_t recv_len;
    int add, left, right;
} ring_part;

/* An allreduce as a sequence of parts, moved on chunk by chunk when polled
 * (op_advance), never waiting: the blocking calls run one op to its end; the
 * reducer's communication thread keeps several moving at once, one thread
 * calling MPI (MPI_THREAD_SERIALIZED is enough). */
struct dist_iallreduce {
    int tag;                 /* RING_TAG + slot: the same slot's messages on every rank */
    int running;
    const ring_elem *el;
    char *buf;
    size_t n, chunk;         /* elements; elements per message */
    dist_algo algo;          /* RING (over dist_comm()) or HIER */
    int part, n_parts;       /* the next part to begin; how many in all */
    ring_part cur;           /* the part in progress */
    size_t chunks, c;        /* its chunks; the next to complete */
    char *tmp;               /* RING_WINDOW chunks received, to be added */
    size_t tmp_bytes;
    MPI_Request req[RING_WINDOW][2];
};

/* Part k of the flat ring over comm (`world` ranks, this one `rank`), of
 * 2 x (world-1): reduce-scatter, then allgather (the file's comment). */
static void flat_part(MPI_Comm comm, int world, int rank, const ring_elem *el, char *buf, size_t n, int k,
                      ring_part *p) {
    int add = k < world - 1, j = add ? k : k - (world - 1);
    /* Reduce-scatter: after step j, segment (r-j-1) holds j+2 ranks' sums.
     * Allgather: rank r starts owning the complete segment (r+1). */
    int s = add ? mod(rank - j, world) : mod(rank + 1 - j, world);
    int r = add ? mod(rank - j - 1, world) : mod(rank - j, world);
    *p = (ring_part){comm,
                     buf + seg_start(n, world, s) * el->size,
                     seg_len(n, world, s),
                     buf + seg_start(n, world, r) * el->size,
                     seg_len(n, world, r),
                     add,
                     mod(rank - 1, world),
                     mod(rank + 1, world)};
}

/* ---- hierarchical: within each node to one leader, the ring between the
 * leaders, back within each node ----
 * node: the ranks of dist_comm() sharing this one's node, by rank; leaders:
 * local rank 0 of every node (MPI_COMM_NULL elsewhere). Made by
 * dist_hier_init. */
static MPI_Comm hier_node = MPI_COMM_NULL, hier_leaders = MPI_COMM_NULL;
static int hier_made = 0, hier_nodes = 1, hier_local = 0, hier_local_world = 1, hier_leader_rank = 0;

int dist_hier_init(void) {
    if (hier_made || dist_world() <= 1) return CNT_OK;
    int rank = dist_rank();
    DIST_MPI_CHECK(MPI_Comm_split_type(dist_comm(), MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &hier_node));
    DIST_MPI_CHECK(MPI_Comm_set_errhandler(hier_node, MPI_ERRORS_RETURN));
    DIST_MPI_CHECK(MPI_Comm_rank(hier_node, &hier_local));
    DIST_MPI_CHECK(MPI_Comm_split(dist_comm(), hier_local == 0 ? 0 : MPI_UNDEFINED, rank, &hier_leaders));
    if (hier_leaders != MPI_COMM_NULL) {
        DIST_MPI_CHECK(MPI_Comm_set_errhandler(hier_leaders, MPI_ERRORS_RETURN));
        DIST_MPI_CHECK(MPI_Comm_rank(hier_leaders, &hier_leader_rank));
    }
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

/* Why not MPI_Reduce and MPI_Bcast for the node's part: they wait inside
 * MPI, spinning and unbounded; these messages wait as the ring's do
 * (dist.progress, the stall limits), the waiting ranks of a node sleep while
 * the leaders' ring runs, and the leader adds its node's buffers in
 * local-rank order, so every rank of every run gets the same bits.
 * A leader's parts: one receive-and-add from each other local rank, the
 * leaders' ring, one send back to each; any other rank's: its send, then
 * its receive. */
static int hier_parts(void) {
    if (hier_local != 0) return 2;
    return 2 * (hier_local_world - 1) + 2 * (hier_nodes - 1);
}

static void hier_part(const dist_iallreduce *op, int k, ring_part *p) {
    int others = hier_local_world - 1, ring = 2 * (hier_nodes - 1);
    if (hier_local != 0)
        *p = k == 0 ? (ring_part){hier_node, op->buf, op->n, NULL, 0, 0, 0, 0}
                    : (ring_part){hier_node, NULL, 0, op->buf, op->n, 0, 0, 0};
    else if (k < others)
        *p = (ring_part){hier_node, NULL, 0, op->buf, op->n, 1, k + 1, k + 1};
    else if (k < others + ring)
        flat_part(hier_leaders, hier_nodes, hier_leader_rank, op->el, op->buf, op->n, k - others, p);
    else
        *p = (ring_part){hier_node, op->buf, op->n, NULL, 0, 0, k - others - ring + 1, k - others - ring + 1};
}

/* Where chunk c of an adding part is received: its slot of the window. */
static char *window_slot(const dist_iallreduce *op, size_t c) {
    return op->tmp + (c % RING_WINDOW) * op->chunk * op->el->size;
}

/* Chunk c of the part in progress: posts its receive (into the window's
 * temporary buffer when adding, else straight into place) and its send. */
static void op_post(dist_iallreduce *op, size_t c) {
    const ring_part *p = &op->cur;
    const ring_elem *el = op->el;
    size_t off = c * op->chunk, rn = piece(p->recv_len, off, op->chunk), sn = piece(p->send_len, off, op->chunk);
    MPI_Request *req = op->req[c % RING_WINDOW];
    req[0] = req[1] = MPI_REQUEST_NULL;
    char *into = p->add ? window_slot(op, c) : p->recv + off * el->size;
    if (rn) DIST_MPI_CHECK(MPI_Irecv(into, (int)rn, el->type, p->left, op->tag, p->comm, &req[0]));
    if (sn) DIST_MPI_CHECK(MPI_Isend(p->send + off * el->size, (int)sn, el->type, p->right, op->tag, p->comm, &req[1]));
}

/* Moves op on as far as its messages allow without waiting: completes each
 * chunk that has arrived in order (adding it), posts the chunk RING_WINDOW
 * on, and begins the next part when one ends. Messages between two ranks
 * with one tag match in the order they were posted (MPI's non-overtaking
 * rule), so chunk c's receive gets chunk c, and the same slot's next op
 * cannot take this one's messages. Returns 1 when a chunk completed or the
 * op ended. */
static int op_advance(dist_iallreduce *op) {
    int moved = 0;
    while (op->running) {
        if (op->c == op->chunks) {
            if (op->part == op->n_parts) {
                op->running = 0;
                return 1;
            }
            if (op->algo == DIST_ALGO_HIER)
                hier_part(op, op->part, &op->cur);
            else
                flat_part(dist_comm(), dist_world(), dist_rank(), op->el, op->buf, op->n, op->part, &op->cur);
            op->part++;
            size_t len = op->cur.send_len > op->cur.recv_len ? op->cur.send_len : op->cur.recv_len;
            op->chunks = (len + op->chunk - 1) / op->chunk;
            op->c = 0;
            for (size_t c = 0; c < op->chunks && c < RING_WINDOW; c++) op_post(op, c);
            continue;
        }
        /* Why test before adding: the chunk must have arrived, and its
         * temporary buffer is reused two chunks on. Neighbours have posted
         * (or will post without waiting) the matching operations. */
        MPI_Request *req = op->req[op->c % RING_WINDOW];
        int arrived = 0;
        DIST_MPI_CHECK(MPI_Testall(2, req, &arrived, MPI_STATUSES_IGNORE));
        if (!arrived) break;
        const ring_part *p = &op->cur;
        size_t off = op->c * op->chunk;
        if (p->add && off < p->recv_len)
            op->el->add(p->recv + off * op->el->size, window_slot(op, op->c), piece(p->recv_len, off, op->chunk));
        if (op->c + RING_WINDOW < op->chunks) op_post(op, op->c + RING_WINDOW);
        op->c++;
        moved = 1;
    }
    return moved;
}

dist_iallreduce *dist_iallreduce_create(int slot) {
    CNT_ASSERT(slot >= 0 && slot < DIST_MAX_IN_FLIGHT);
    dist_iallreduce *op = cnt_calloc(1, sizeof *op);
    op->tag = RING_TAG + slot;
    return op;
}

void dist_iallreduce_free(dist_iallreduce *op) {
    if (!op) return;
    CNT_ASSERT(!op->running);
    free(op->tmp);
    free(op);
}

void dist_iallreduce_start(dist_iallreduce *op, void *buf, size_t n, int half, dist_algo algo, size_t chunk_bytes) {
    CNT_ASSERT(!op->running && (algo == DIST_ALGO_RING || algo == DIST_ALGO_HIER));
    CNT_ASSERT(algo != DIST_ALGO_HIER || hier_made || dist_world() <= 1); /* dist_hier_init, at start-up */
    op->el = half ? &elem_half : &elem_float;
    op->buf = buf;
    op->n = n;
    op->algo = algo;
    op->chunk = chunk_elems(op->el, chunk_bytes);
    op->part = 0;
    op->n_parts = n == 0 || dist_world() <= 1 ? 0 : algo == DIST_ALGO_HIER ? hier_parts() : 2 * (dist_world() - 1);
    op->chunks = op->c = 0;
    size_t tmp = RING_WINDOW * op->chunk * op->el->size;
    if (op->n_parts && tmp > op->tmp_bytes) {
        free(op->tmp);
        op->tmp = cnt_malloc(tmp);
        op->tmp_bytes = tmp;
    }
    op->running = 1;
    op_advance(op); /* posts the first part's first chunks */
}

int dist_iallreduce_done(const dist_iallreduce *op) { return !op->running; }

typedef struct ops_wait {
    dist_iallreduce *const *ops;
    int n;
    int (*wake)(void *ctx);
    void *ctx;
} ops_wait;

static int ops_poll(void *ctx) {
    ops_wait *w = ctx;
    int moved = 0, running = 0;
    for (int i = 0; i < w->n; i++) {
        if (!w->ops[i] || !w->ops[i]->running) continue;
        moved |= op_advance(w->ops[i]);
        running |= w->ops[i]->running;
    }
    return moved || !running || (w->wake && w->wake(w->ctx));
}

void dist_iallreduce_wait(dist_iallreduce *const *ops, int n, int (*wake)(void *ctx), void *ctx) {
    ops_wait w = {ops, n, wake, ctx};
    dist_wait_mode mode = dist_progress_mode() == DIST_PROGRESS_SPIN ? DIST_WAIT_YIELD : DIST_WAIT_PACED;
    dist_wait_polled(ops_poll, &w, "the ring allreduce", mode);
}

/* The blocking calls: one op, run to its end. Slot 0: no op of the
 * reducer's is in flight while another thread's blocking call runs (one
 * thread calls MPI at a time, and the reducer's ops all end within its
 * step), and slot 0's messages are matched in order anyway. */
static dist_iallreduce *blocking_op = NULL;

static void run_blocking(void *buf, size_t n, int half, dist_algo algo, size_t chunk_bytes) {
    if (!blocking_op) blocking_op = dist_iallreduce_create(0);
    dist_iallreduce_start(blocking_op, buf, n, half, algo, chunk_bytes);
    while (blocking_op->running) dist_iallreduce_wait(&blocking_op, 1, NULL, NULL);
}

void dist_ring_allreduce(float *buf, size_t n, size_t chunk_bytes) {
    run_blocking(buf, n, 0, DIST_ALGO_RING, chunk_bytes);
}

void dist_ring_allreduce_f16(uint16_t *buf, size_t n, size_t chunk_bytes) {
    run_blocking(buf, n, 1, DIST_ALGO_RING, chunk_bytes);
}

void dist_hier_allreduce(float *buf, size_t n, size_t chunk_bytes) {
    run_blocking(buf, n, 0, DIST_ALGO_HIER, chunk_bytes);
}

void dist_hier_allreduce_f16(uint16_t *buf, size_t n, size_t chunk_bytes) {
    run_blocking(buf, n, 1, DIST_ALGO_HIER, chunk_bytes);
}

#else /* !CNT_HAVE_MPI: a world of one holds the sum already */

struct dist_iallreduce {
    int slot;
};

dist_iallreduce *dist_iallreduce_create(int slot) {
    CNT_ASSERT(slot >= 0 && slot < DIST_MAX_IN_FLIGHT);
    dist_iallreduce *op = cnt_calloc(1, sizeof *op);
    op->slot = slot;
    return op;
}

void dist_iallreduce_free(dist_iallreduce *op) { free(op); }

void dist_iallreduce_start(dist_iallreduce *op, void *buf, size_t n, int half, dist_algo algo, size_t chunk_bytes) {
    (void)op;
    (void)buf;
    (void)n;
    (void)half;
    (void)chunk_bytes;
    CNT_ASSERT(algo == DIST_ALGO_RING || algo == DIST_ALGO_HIER);
}

int dist_iallreduce_done(const dist_iallreduce *op) {
    (void)op;
    return 1;
}

void dist_iallreduce_wait(dist_iallreduce *const *ops, int n, int (*wake)(void *ctx), void *ctx) {
    (void)ops;
    (void)n;
    (void)wake;
    (void)ctx;
}

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
