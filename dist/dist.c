/*
 * dist/dist.c - the job's ranks and host-memory collectives (see dist/dist.h).
 *
 * Built with MPI (CNT_HAVE_MPI=1): dist_init starts MPI asking for
 * MPI_THREAD_SERIALIZED, learns rank, world and the node-local rank/world
 * (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), names the rank in log
 * prefixes and installs MPI_Abort as cnt_fatal()'s hook. MPI_COMM_WORLD gets
 * MPI_ERRORS_RETURN so every failing call comes back to DIST_MPI_CHECK, which
 * prints the statement, file:line, rank and MPI's error string, then aborts the
 * whole job. Collectives on buffers that may exceed INT_MAX elements (MPI counts
 * are int) are issued in chunks. Collectives are issued in their nonblocking
 * form and completed by dist_wait_bounded (dist/wait.c), so a rank whose peers
 * stop arriving warns and ends the job instead of hanging; the gradient sums
 * are the measured exception (allreduce_blocking).
 *
 * Built without MPI (CNT_HAVE_MPI=0) every function is the world-of-one
 * version: broadcast and allreduce leave the buffer as it is, allgather copies
 * the single value, the byte gather copies, abort exits.
 *
 * Together with dist/ring.c, dist/wait.c and dist/watchdog.c this is the only
 * place in the project that knows whether MPI is there.
 */
#include "dist/dist.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/half.h"
#include "common/timer.h"
#include "dist/wait.h"

#if CNT_HAVE_MPI
#include <mpi.h>
#endif
#if CNT_HAVE_NCCL
#include "dist/nccl.h"
#endif

static int dist_initialised = 0; /* dist_init succeeded and MPI is up */
static int dist_finalised = 0;   /* dist_finalize already ran */
static int g_rank = 0;       /* in the job (MPI_COMM_WORLD) */
static int g_world = 1;
static int g_group_rank = 0; /* in this rank's group (dist_split_servers): what dist_rank says */
static int g_group_world = 1;
static int g_local_rank = 0;
static int g_local_world = 1;

int dist_rank(void) { return g_group_rank; }
int dist_world(void) { return g_group_world; }
int dist_job_rank(void) { return g_rank; }
int dist_job_world(void) { return g_world; }
int dist_local_rank(void) { return g_local_rank; }
int dist_local_world(void) { return g_local_world; }
static int g_nodes = 1, g_crowded = 0; /* dist_nodes: set by beats_init */
int dist_nodes(int *crowded) {
    if (crowded) *crowded = g_crowded;
    return g_nodes;
}
static int g_local_servers = 0;
int dist_local_servers(void) { return g_local_servers; }

void dist_libraries(char *buf, size_t len) {
    (void)buf, (void)len; /* nothing to say without MPI */
#if CNT_HAVE_MPI
    /* one of the few calls MPI allows before MPI_Init; its first line ("Open MPI v4.1.4, package: ...") */
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    if (MPI_Get_library_version(ver, &n) != MPI_SUCCESS) snprintf(ver, sizeof ver, "(version unknown)");
    ver[strcspn(ver, ",\n")] = '\0';
    char built[64];
    snprintf(built, sizeof built, "(built with mpi.h of MPI %d.%d)", MPI_VERSION, MPI_SUBVERSION);
    file_library_line(buf, len, ver, built, (const void *)MPI_Init);
#endif
#if CNT_HAVE_NCCL
    dist_nccl_libraries(buf, len);
#endif
}

#if CNT_HAVE_MPI

static int g_set_tcp_links = 0;  /* dist_init set OMPI_MCA_btl_tcp_links */
static int g_tcp_links = -1;     /* what Open MPI took (dist_tcp_links) */

/* The fp16 sum's datatype and op (see dist_allreduce_sum_f16). */
static MPI_Datatype half_type = MPI_DATATYPE_NULL;
static MPI_Op half_sum_op = MPI_OP_NULL;

/* The communicator of every collective: MPI_COMM_WORLD, or this rank's group
 * after dist_split_servers. */
static MPI_Comm g_comm = MPI_COMM_NULL;
static MPI_Win g_beats_win = MPI_WIN_NULL; /* the node's dist_beat slots (dist/wait.h) */

MPI_Comm dist_comm(void) { return g_comm == MPI_COMM_NULL ? MPI_COMM_WORLD : g_comm; }

/* Largest element count handed to one MPI call: below INT_MAX, and a power of
 * two so chunks of floats or bytes stay nicely aligned. */
#define DIST_MAX_COUNT ((size_t)1 << 30)

void dist_mpi_fail_at(const char *file, int line, const char *stmt, int err) {
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = '\0';
    cnt_fatal_at(file, line, 1, NULL, "MPI call failed: %s: %s (error %d)", stmt,
                 len ? msg : "unknown MPI error", err);
}

/* cnt_fatal()'s hook: end every rank, so none is left waiting in a collective
 * for the one that failed. Alone, a plain exit (cnt_fatal's own) is enough. */
/* Ends every rank. Why the pause: MPI_Abort has the launcher kill the other
 * processes, and this rank's own last lines (the error that explains the
 * abort) are still on their way through mpirun's output forwarding; killed
 * too early, they were seen to go missing. A quarter second on a path that
 * ends the job anyway. */
static void abort_job(int code) {
    if (!(dist_initialised && !dist_finalised && g_world > 1)) return;
    fflush(stdout);
    fflush(stderr);
    struct timespec pause = {0, 250 * 1000 * 1000};
    nanosleep(&pause, NULL);
    MPI_Abort(MPI_COMM_WORLD, code);
}

static void dist_abort_hook(int code) { abort_job(code); }

/* Open MPI reads OMPI_MCA_* from the environment in MPI_Init; why 2:
 * dist_init in dist/dist.h. */
#define TCP_LINKS_VAR "OMPI_MCA_btl_tcp_links"
static int read_tcp_links(void);
static void beats_init(MPI_Comm local);

/* Open MPI's mpirun and its PMIx server (also under Slurm's srun --mpi=pmix),
 * PMI-1/2 (srun --mpi=pmi2, MPICH's Hydra). */
int dist_launched_by_mpi(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int dist_init(int *argc, char ***argv) {
    if (dist_initialised) return CNT_OK;
    if (!dist_launched_by_mpi()) {
        cnt_log_set_rank(0, 1); /* a world of one; dist_initialised stays 0: no MPI call is made */
        return CNT_OK;
    }
    if (!getenv(TCP_LINKS_VAR)) {
        if (setenv(TCP_LINKS_VAR, "2", 0) != 0) return cnt_err_set("setenv %s: out of memory", TCP_LINKS_VAR);
        g_set_tcp_links = 1;
    }
    int provided = MPI_THREAD_SINGLE;
    int err = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (err != MPI_SUCCESS) dist_mpi_fail_at(__FILE__, __LINE__, "MPI_Init_thread", err);
    if (provided < MPI_THREAD_SERIALIZED) {
        /* Every rank links the same library, so every rank takes this branch. */
        MPI_Finalize();
        dist_finalised = 1;
        return cnt_err_set("the MPI library grants thread level %d, below the "
                           "MPI_THREAD_SERIALIZED (%d) the trainer needs (its "
                           "communication thread calls MPI); rebuild Open MPI with "
                           "thread support",
                           provided, MPI_THREAD_SERIALIZED);
    }
    /* From here on, failures come back as codes to DIST_MPI_CHECK instead of
     * MPI's default handler killing the job with a message that lacks our
     * file:line. */
    DIST_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    DIST_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
    DIST_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_world));
    g_group_rank = g_rank;
    g_group_world = g_world;
    g_tcp_links = read_tcp_links();
    cnt_log_set_rank(g_rank, g_world);
    dist_initialised = 1;
    cnt_set_abort_hook(dist_abort_hook);

    MPI_Comm local;
    DIST_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank,
                                       MPI_INFO_NULL, &local));
    DIST_MPI_CHECK(MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN));
    DIST_MPI_CHECK(MPI_Comm_rank(local, &g_local_rank));
    DIST_MPI_CHECK(MPI_Comm_size(local, &g_local_world));
    beats_init(local);
    DIST_MPI_CHECK(MPI_Comm_free(&local));
    return CNT_OK;
}

/* What a rank tells every other at dist_init for the stall messages' table
 * and relay (dist/wait.h, dist/beats.c). */
#define BEAT_ADDRS 4
typedef struct beat_card {
    uint64_t token;           /* rank 0's random number: the job's */
    int32_t node;             /* the job rank of its node's first rank */
    uint16_t port;            /* a node's first rank: its relay socket's port; 0: none */
    uint16_t naddr;           /* ... and its host's addresses */
    uint32_t addr[BEAT_ADDRS];
    char host[64];            /* ... and its host name */
} beat_card;

static int *g_node_of;             /* [world] */
static beat_card *g_cards;         /* [world] */
static const char **g_host_of;     /* [world] into g_cards */
static struct sockaddr_in *g_dest; /* the other nodes' first ranks */

static uint64_t job_token(void) {
    uint64_t t = 0;
    if (getrandom(&t, sizeof t, 0) != (ssize_t)sizeof t || t == 0)
        t = ((uint64_t)getpid() << 32) ^ (uint64_t)(time_now() * 1e9); /* not secret: it tells jobs apart */
    return t;
}

/* The table of slots, one per rank of the job, shared by the ranks of the
 * node (allocated by its first rank, zeroed before any rank writes), and
 * the relay between nodes: every rank learns every node's first rank, and
 * where it listens. Then the monitor has it (dist_beats_attach). */
static void beats_init(MPI_Comm local) {
    MPI_Request req;
    int first = g_rank;
    DIST_MPI_CHECK(MPI_Iallreduce(&g_rank, &first, 1, MPI_INT, MPI_MIN, local, &req));
    dist_wait_bounded(1, &req, "dist_init", DIST_WAIT_SLEEP);
    size_t bytes = (size_t)g_world * sizeof(dist_beat);
    dist_beat *base = NULL, *all = NULL;
    MPI_Aint size = 0;
    int disp = 0;
    DIST_MPI_CHECK(MPI_Win_allocate_shared(g_local_rank == 0 ? (MPI_Aint)bytes : 0, (int)sizeof(dist_beat),
                                           MPI_INFO_NULL, local, &base, &g_beats_win));
    DIST_MPI_CHECK(MPI_Win_shared_query(g_beats_win, 0, &size, &disp, &all));
    if (g_local_rank == 0) memset(all, 0, bytes);
    DIST_MPI_CHECK(MPI_Ibarrier(local, &req)); /* zeroed before anyone writes its slot */
    dist_wait_bounded(1, &req, "dist_init", DIST_WAIT_SLEEP);

    beat_card mine;
    memset(&mine, 0, sizeof mine);
    mine.node = first;
    uint16_t port = 0;
    int fd = dist_beats_socket(&port); /* every rank sends; only a node's first rank is sent to */
    if (g_local_rank == 0) {
        if (fd >= 0) {
            mine.port = port;
            mine.naddr = (uint16_t)dist_beats_addresses(mine.addr, BEAT_ADDRS);
        }
        /* the launcher's name for the node (what mpirun's own messages say), else the kernel's */
        const char *name = getenv("PMIX_HOSTNAME");
        if (!name || !*name) name = getenv("SLURMD_NODENAME");
        if (name && *name)
            snprintf(mine.host, sizeof mine.host, "%s", name);
        else if (gethostname(mine.host, sizeof mine.host - 1) != 0)
            snprintf(mine.host, sizeof mine.host, "rank %d's node", g_rank);
    }
    if (g_rank == 0) mine.token = job_token();
    g_cards = cnt_malloc((size_t)g_world * sizeof *g_cards);
    DIST_MPI_CHECK(MPI_Iallgather(&mine, (int)sizeof mine, MPI_BYTE, g_cards, (int)sizeof mine, MPI_BYTE,
                                  MPI_COMM_WORLD, &req));
    dist_wait_bounded(1, &req, "dist_init", DIST_WAIT_SLEEP);

    g_node_of = cnt_malloc((size_t)g_world * sizeof *g_node_of);
    g_host_of = cnt_malloc((size_t)g_world * sizeof *g_host_of);
    int nodes = 0, n_dest = 0;
    unsigned char *shared = cnt_calloc((size_t)g_world, 1); /* [node] it has a rank besides its first */
    for (int r = 0; r < g_world; r++) {
        int node = g_cards[r].node;
        g_node_of[r] = node;
        g_host_of[r] = g_cards[node].host;
        nodes += node == r;
        if (node != r && !shared[node]) {
            shared[node] = 1;
            g_crowded++;
        }
        if (node == r && r != first) n_dest += g_cards[r].port ? g_cards[r].naddr : 0;
    }
    free(shared);
    g_nodes = nodes;
    g_dest = cnt_calloc((size_t)(n_dest ? n_dest : 1), sizeof *g_dest);
    n_dest = 0;
    for (int r = 0; r < g_world; r++) {
        const beat_card *c = &g_cards[r];
        if (c->node != r || r == first || c->port == 0) continue;
        for (int i = 0; i < c->naddr && i < BEAT_ADDRS; i++)
            g_dest[n_dest++] = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(c->port),
                                                    .sin_addr.s_addr = c->addr[i]};
    }
    if (nodes > 1 && g_local_rank == 0 && mine.naddr == 0)
        log_warn("stall messages: no UDP socket or IPv4 address on %s for the other nodes' beats; a rank of another "
                 "node that stops inside a blocking call will not be named", mine.host);
    dist_beats t = {
        .slots = all,
        .world = g_world,
        .mine = g_rank,
        .node_of = g_node_of,
        .host = g_host_of,
        .fd = nodes > 1 ? fd : -1,
        .receiver = g_local_rank == 0,
        .dest = g_dest,
        .n_dest = n_dest,
        .token = g_cards[0].token,
    };
    if (nodes == 1 && fd >= 0) close(fd);
    dist_beats_attach(&t);
}

/* Open MPI's btl_tcp_links as the library took it, through MPI_T; -1 where
 * it has none. Read once, in dist_init: before any other thread calls MPI. */
static int read_tcp_links(void) {
    int provided, idx, count, links = -1;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return -1;
    MPI_T_cvar_handle h;
    MPI_Datatype type;
    MPI_T_enum enumtype;
    char name[64], desc[8];
    int name_len = sizeof name, desc_len = sizeof desc, verbosity, bind, scope;
    if (MPI_T_cvar_get_index("btl_tcp_links", &idx) == MPI_SUCCESS &&
        MPI_T_cvar_get_info(idx, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len, &bind, &scope) ==
            MPI_SUCCESS &&
        (type == MPI_UNSIGNED || type == MPI_INT) &&
        MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) == MPI_SUCCESS) {
        unsigned int v = 0; /* MPI_INT and MPI_UNSIGNED have one size */
        if (count == 1 && MPI_T_cvar_read(h, &v) == MPI_SUCCESS) links = (int)v;
        MPI_T_cvar_handle_free(&h);
    }
    MPI_T_finalize();
    return links;
}

int dist_tcp_links(int *chosen) {
    if (chosen) *chosen = g_set_tcp_links;
    return g_tcp_links;
}

void dist_finalize(void) {
    if (!dist_initialised || dist_finalised) return;
    /* Why a barrier: every rank reaches the end of its work before any tears
     * MPI down; a rank still busy (or stuck) keeps the others waiting here, in
     * a bounded collective, rather than inside MPI_Finalize. */
    dist_phase("shutdown");
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
    dist_wait_bounded(1, &req, "dist_finalize", DIST_WAIT_SLEEP);
    dist_beats_attach(NULL); /* the monitor lets go of the table before it goes */
    if (g_beats_win != MPI_WIN_NULL) DIST_MPI_CHECK(MPI_Win_free(&g_beats_win));
    free(g_node_of);
    free(g_host_of);
    free(g_cards);
    free(g_dest);
    if (g_comm != MPI_COMM_NULL) DIST_MPI_CHECK(MPI_Comm_free(&g_comm));
    if (half_sum_op != MPI_OP_NULL) DIST_MPI_CHECK(MPI_Op_free(&half_sum_op));
    if (half_type != MPI_DATATYPE_NULL) DIST_MPI_CHECK(MPI_Type_free(&half_type));
    dist_finalised = 1;
    DIST_MPI_CHECK(MPI_Finalize());
}

void dist_abort(int code) {
    if (code == 0) code = 1;
    cnt_say_last_words();
    abort_job(code);
    exit(code);
}

static int dist_active(void) { return dist_initialised && !dist_finalised && g_group_world > 1; }

int dist_split_servers(int n_servers) {
    CNT_ASSERT(n_servers >= 1 && n_servers < g_world && g_comm == MPI_COMM_NULL);
    int server = g_rank >= g_world - n_servers;
    /* Why a split: the trainer's collectives (the initial weights, the stop
     * signal, progress, evaluation) then run among the workers unchanged,
     * while the servers only answer point-to-point messages (dist/ps.h). */
    DIST_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, server, g_rank, &g_comm));
    DIST_MPI_CHECK(MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN));
    DIST_MPI_CHECK(MPI_Comm_rank(g_comm, &g_group_rank));
    DIST_MPI_CHECK(MPI_Comm_size(g_comm, &g_group_world));
    dist_beats_set_group(server); /* the stall messages compare a rank with its own group only */
    /* the servers of this node, for the workers' memory check (train/memory.h) */
    MPI_Comm local;
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &local));
    DIST_MPI_CHECK(MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN));
    DIST_MPI_CHECK(MPI_Iallreduce(&server, &g_local_servers, 1, MPI_INT, MPI_SUM, local, &req));
    dist_wait_bounded(1, &req, "dist_split_servers", DIST_WAIT_SLEEP);
    DIST_MPI_CHECK(MPI_Comm_free(&local));
    return server;
}

void dist_barrier(void) {
    if (!dist_active()) return;
    /* Why: the caller needs every rank to have reached this point (e.g. rank 0
     * wrote a file the others are about to read). Returns once all arrive. */
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Ibarrier(dist_comm(), &req));
    dist_wait_bounded(1, &req, "dist_barrier", DIST_WAIT_SLEEP);
}

void dist_broadcast(void *buf, size_t bytes, int root) {
    if (!dist_active()) return;
    CNT_ASSERT(root >= 0 && root < g_group_world);
    /* Returns once this rank's part of each chunk is done. Chunks keep every
     * count below INT_MAX, MPI's limit for a count. */
    char *p = buf;
    for (size_t off = 0; off < bytes; off += DIST_MAX_COUNT) {
        size_t len = bytes - off < DIST_MAX_COUNT ? bytes - off : DIST_MAX_COUNT;
        MPI_Request req;
        DIST_MPI_CHECK(MPI_Ibcast(p + off, (int)len, MPI_BYTE, root, dist_comm(), &req));
        dist_wait_bounded(1, &req, "dist_broadcast", DIST_WAIT_SLEEP);
    }
}

void dist_allgather_u64(uint64_t value, uint64_t *out) {
    if (!dist_active()) {
        out[0] = value;
        return;
    }
    /* Every rank's value is needed before anyone goes on. */
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Iallgather(&value, 1, MPI_UINT64_T, out, 1, MPI_UINT64_T, dist_comm(), &req));
    dist_wait_bounded(1, &req, "dist_allgather_u64", DIST_WAIT_SLEEP);
}

int64_t dist_first_nonzero(int64_t value) {
    int world = dist_world();
    uint64_t *all = cnt_malloc((size_t)world * sizeof *all);
    dist_allgather_u64((uint64_t)value, all);
    int64_t first = 0;
    for (int q = world - 1; q >= 0; q--)
        if (all[q]) first = (int64_t)all[q];
    free(all);
    return first;
}

/* The lagged maximum's exchange in flight (dist_max_lagged). */
static MPI_Request lag_req = MPI_REQUEST_NULL;
static int64_t lag_send, lag_recv;

int64_t dist_max_lagged(int64_t value) {
    if (!dist_active()) return value;
    int64_t prev = 0;
    if (lag_req != MPI_REQUEST_NULL) {
        /* sent a step ago by every rank: complete in practice */
        dist_wait_bounded(1, &lag_req, "dist_max_lagged", DIST_WAIT_SLEEP);
        prev = lag_recv;
    }
    lag_send = value;
    DIST_MPI_CHECK(MPI_Iallreduce(&lag_send, &lag_recv, 1, MPI_INT64_T, MPI_MAX, dist_comm(), &lag_req));
    return prev;
}

int64_t dist_max_lagged_drain(void) {
    if (!dist_active() || lag_req == MPI_REQUEST_NULL) return 0;
    dist_wait_bounded(1, &lag_req, "dist_max_lagged", DIST_WAIT_SLEEP);
    return lag_recv;
}

void dist_gather_bytes(const void *buf, size_t n, void **out, size_t **counts) {
    if (!dist_active()) {
        *out = cnt_malloc(n ? n : 1);
        if (n) memcpy(*out, buf, n);
        *counts = cnt_malloc(sizeof **counts);
        (*counts)[0] = n;
        return;
    }
    /* Two collectives: rank 0 learns every size, then receives the bytes. */
    uint64_t mine = n;
    uint64_t *sizes = g_group_rank == 0 ? cnt_malloc((size_t)g_group_world * sizeof *sizes) : NULL;
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Igather(&mine, 1, MPI_UINT64_T, sizes, 1, MPI_UINT64_T, 0, dist_comm(), &req));
    dist_wait_bounded(1, &req, "dist_gather_bytes", DIST_WAIT_SLEEP);
    if (n > INT_MAX) cnt_fatal("dist_gather_bytes: %zu bytes on rank %d exceed MPI's count limit", n, g_rank);
    int *rcounts = NULL, *displs = NULL;
    char *all = NULL;
    if (g_group_rank == 0) {
        rcounts = cnt_malloc((size_t)g_group_world * sizeof *rcounts);
        displs = cnt_malloc((size_t)g_group_world * sizeof *displs);
        *counts = cnt_malloc((size_t)g_group_world * sizeof **counts);
        uint64_t total = 0;
        for (int r = 0; r < g_group_world; r++) {
            if (total + sizes[r] > INT_MAX)
                cnt_fatal("dist_gather_bytes: more than %d bytes in all exceed MPI's count limit", INT_MAX);
            displs[r] = (int)total;
            rcounts[r] = (int)sizes[r];
            (*counts)[r] = (size_t)sizes[r];
            total += sizes[r];
        }
        all = cnt_malloc(total ? (size_t)total : 1);
    }
    DIST_MPI_CHECK(MPI_Igatherv(buf, (int)n, MPI_BYTE, all, rcounts, displs, MPI_BYTE, 0, dist_comm(), &req));
    dist_wait_bounded(1, &req, "dist_gather_bytes", DIST_WAIT_SLEEP);
    if (g_group_rank != 0) *counts = NULL;
    *out = all;
    free(sizes);
    free(rcounts);
    free(displs);
}

/* The gradient sums (dist_allreduce_sum, dist_allreduce_sum_f16 with
 * DIST_ALGO_MPI) stay blocking MPI_Allreduce: MPI_Iallreduce is a different
 * implementation in Open MPI (libnbc, progressed only while polled) and
 * took 2.8-7x MPI_Allreduce's time for 256 KiB-16 MiB at 2 ranks polled by
 * dist_wait_bounded, and 2.6-5.7x polled without sleeping
 * (tools/bench_allreduce; docs/ARCHITECTURE.md, "Bounded waits"). Those
 * sums are not unguarded: the stall watchdog's arrival barrier
 * (dist/watchdog.c) runs right before each one, with the same limits, so
 * every rank is about to join when the blocking call starts; and a rank
 * that stops inside the call is caught by the deadman thread
 * (dist_blocking_begin, dist/wait.c), which ends this process after the abort
 * limit. The trainer's other, small collectives go through allreduce_bounded. */
static void allreduce_blocking(void *buf, size_t n, size_t esize, MPI_Datatype type, MPI_Op op) {
    char *p = buf;
    dist_blocking_begin("MPI_Allreduce"); /* bounded by the deadman thread (dist/wait.c) */
    for (size_t off = 0; off < n; off += DIST_MAX_COUNT) {
        size_t len = n - off < DIST_MAX_COUNT ? n - off : DIST_MAX_COUNT;
        DIST_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + off * esize, (int)len, type, op, dist_comm()));
    }
    dist_blocking_end();
}

/* In-place sum of n elements of `type` (esize bytes each) under `op`, in
 * chunks below INT_MAX elements, each completed by a bounded wait. */
static void allreduce_bounded(void *buf, size_t n, size_t esize, MPI_Datatype type, MPI_Op op,
                              const char *collective) {
    char *p = buf;
    for (size_t off = 0; off < n; off += DIST_MAX_COUNT) {
        size_t len = n - off < DIST_MAX_COUNT ? n - off : DIST_MAX_COUNT;
        MPI_Request req;
        DIST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p + off * esize, (int)len, type, op, dist_comm(), &req));
        dist_wait_bounded(1, &req, collective, DIST_WAIT_SLEEP);
    }
}

void dist_allreduce_sum(float *buf, size_t n, dist_algo algo) {
    if (!dist_active()) return;
    if (algo == DIST_ALGO_RING) {
        dist_ring_allreduce(buf, n, 0);
        return;
    }
    if (algo == DIST_ALGO_HIER) {
        dist_hier_allreduce(buf, n, 0);
        return;
    }
    CNT_ASSERT(algo == DIST_ALGO_MPI);
    allreduce_blocking(buf, n, sizeof *buf, MPI_FLOAT, MPI_SUM);
}

/* fp16 sums: a 16-bit datatype of our own (half_type, so the op is never
 * applied to anything else by mistake) and the op (half_sum_op) adding halves
 * through float. Created
 * at first use by whichever thread runs the first fp16 allreduce (one thread
 * at a time calls MPI), freed by dist_finalize. */

static void half_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    fp16_add_array(inout, in, (size_t)*len);
}

void dist_allreduce_sum_f16(uint16_t *buf, size_t n, dist_algo algo) {
    if (!dist_active()) return;
    if (algo == DIST_ALGO_RING) {
        dist_ring_allreduce_f16(buf, n, 0);
        return;
    }
    if (algo == DIST_ALGO_HIER) {
        dist_hier_allreduce_f16(buf, n, 0);
        return;
    }
    CNT_ASSERT(algo == DIST_ALGO_MPI);
    if (half_type == MPI_DATATYPE_NULL) {
        DIST_MPI_CHECK(MPI_Type_contiguous(1, MPI_UINT16_T, &half_type));
        DIST_MPI_CHECK(MPI_Type_commit(&half_type));
        /* Commutative: a + b == b + a bit for bit, in float and after rounding. */
        DIST_MPI_CHECK(MPI_Op_create(half_sum, 1, &half_sum_op));
    }
    allreduce_blocking(buf, n, sizeof *buf, half_type, half_sum_op);
}

void dist_allreduce_sum_f64(double *buf, size_t n) {
    if (!dist_active()) return;
    allreduce_bounded(buf, n, sizeof *buf, MPI_DOUBLE, MPI_SUM, "dist_allreduce_sum_f64");
}

#else /* !CNT_HAVE_MPI: a world of one */

void dist_mpi_fail_at(const char *file, int line, const char *stmt, int err) {
    cnt_fatal_at(file, line, 1, NULL, "MPI call failed: %s (error %d; built without MPI)", stmt,
                 err);
}

int dist_launched_by_mpi(void) { return 0; }

int dist_init(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    dist_initialised = 1;
    cnt_log_set_rank(0, 1);
    return CNT_OK;
}

int dist_tcp_links(int *chosen) {
    if (chosen) *chosen = 0;
    return -1;
}

void dist_finalize(void) {
    if (!dist_initialised || dist_finalised) return;
    dist_finalised = 1;
}

void dist_abort(int code) { exit(code == 0 ? 1 : code); }

int dist_split_servers(int n_servers) {
    (void)n_servers;
    CNT_ASSERT(!"dist_split_servers needs a world of at least 2: built without MPI");
    return 0;
}

void dist_barrier(void) {}

void dist_broadcast(void *buf, size_t bytes, int root) {
    (void)buf;
    (void)bytes;
    CNT_ASSERT(root == 0);
}

void dist_allgather_u64(uint64_t value, uint64_t *out) { out[0] = value; }
int64_t dist_first_nonzero(int64_t value) { return value; }

int64_t dist_max_lagged(int64_t value) { return value; }
int64_t dist_max_lagged_drain(void) { return 0; }

void dist_gather_bytes(const void *buf, size_t n, void **out, size_t **counts) {
    *out = cnt_malloc(n ? n : 1);
    if (n) memcpy(*out, buf, n);
    *counts = cnt_malloc(sizeof **counts);
    (*counts)[0] = n;
}

void dist_allreduce_sum(float *buf, size_t n, dist_algo algo) {
    (void)buf;
    (void)n;
    CNT_ASSERT(algo == DIST_ALGO_MPI || algo == DIST_ALGO_RING);
}

void dist_allreduce_sum_f64(double *buf, size_t n) {
    (void)buf;
    (void)n;
}

void dist_allreduce_sum_f16(uint16_t *buf, size_t n, dist_algo algo) {
    (void)buf;
    (void)n;
    CNT_ASSERT(algo == DIST_ALGO_MPI || algo == DIST_ALGO_RING);
}

#endif

/* Written with the collectives above, so the same with and without MPI. */
double dist_allreduce_time_us(dist_algo algo, size_t bytes, int reps) {
    int world = dist_world();
    if (world <= 1) return 0;
    size_t n = bytes / sizeof(float) ? bytes / sizeof(float) : 1;
    float *buf = cnt_calloc(n, sizeof *buf);
    double best = 0;
    for (int k = 0; k < reps; k++) {
        /* Why the barrier: the time is the sum's, not the wait for a rank
         * still finishing the one before. */
        dist_barrier();
        double t0 = time_now();
        dist_allreduce_sum(buf, n, algo);
        double t = time_now() - t0;
        if (k == 0 || t < best) best = t;
    }
    free(buf);
    return dist_slowest_us(best);
}

double dist_slowest_us(double seconds) {
    int world = dist_world();
    uint64_t *all = cnt_malloc((size_t)world * sizeof *all);
    dist_allgather_u64((uint64_t)(seconds * 1e9), all);
    uint64_t slowest = 0;
    for (int r = 0; r < world; r++)
        if (all[r] > slowest) slowest = all[r];
    free(all);
    return (double)slowest * 1e-3;
}
