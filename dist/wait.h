/*
 * dist/wait.h - bounded waits, for dist/ sources only (dist.c, ring.c,
 * watchdog.c, ps.c, nccl.c). The public side (dist_set_wait_limits,
 * dist_phase) is in dist/dist.h; the MPI part of this header needs mpi.h,
 * which only dist/ includes.
 *
 * Every wait in dist/ that can hang on another rank is one call of
 * dist_wait_until: the site says how to poll, how to pause between polls and
 * how to name what is late; the loop owns the clock, the limits, the
 * warnings, the abort and the "stall over" line, so they read and behave the
 * same everywhere.
 */
#ifndef CNT_DIST_WAIT_H
#define CNT_DIST_WAIT_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "dist/dist.h"

/* The exit status of a job ended by a stall (a bounded wait past
 * dist.stall_abort_s, or the blocking-call deadman): the status of any other
 * error (docs/faults.md). */
#define DIST_STALL_EXIT 1

/* What a site's describe callback is asked to write. The lines read
 *   warning: stall: <WHO> has waited T s <LATE><warn_note>
 *   error:   stall: <WHO> has waited T s <LATE><abort_note>; ending the job
 *            (dist.stall_abort_s = A: raise it if that can legitimately take longer)
 *   warning: stall over: <OVER> after T s
 * (T in whole seconds in the first two, tenths in the last). */
typedef enum dist_wait_text {
    DIST_WAIT_WHO,  /* who waits: "rank 3", "step 2 bucket 0" */
    DIST_WAIT_LATE, /* who or what is still missing: "for rank 1 (last seen at step 1 bucket 0)",
                     * "in dist_broadcast during evaluation" */
    DIST_WAIT_OVER  /* what ended the wait: "step 2 bucket 0: every rank arrived" */
} dist_wait_text;

/* One bounded wait: what it polls, how it names what is late, how it pauses
 * between polls, and its limits. */
typedef struct dist_wait_site {
    /* 1 once the wait is over, 0 while not; it may do work (receive what
     * has arrived). Called first before anything else, so a wait that is
     * already over costs one call. */
    int (*poll)(void *ctx);
    /* The late-ranks callback: writes the text `part` asks for (above) into
     * buf (cap bytes, NUL-terminated; it may truncate). Called only when a
     * line is due, so it may take its time. */
    void (*describe)(void *ctx, dist_wait_text part, char *buf, size_t cap);
    void *ctx;
    /* Appended to LATE in the warning and in the abort's error (static text,
     * "" for none): what the wait means, e.g. " for the other ranks". */
    const char *warn_note, *abort_note;
    /* The spin/sleep policy. No pause while fewer than spin_polls polls have
     * been made after the first and while less than spin_s seconds have
     * passed; then, between polls, a sleep from 10 us doubling to
     * max_sleep_us, or sched_yield when max_sleep_us is 0. A sleep that a
     * signal interrupts (EINTR: SIGTERM, SIGUSR1) goes on for what is left
     * of it: a signal neither ends the wait nor makes it spin. yield_s,
     * when above spin_s: sched_yield between polls until yield_s seconds,
     * and only then the sleeps. */
    int spin_polls;
    double spin_s;
    long max_sleep_us;
    double yield_s;
    /* when relax_s > 0: from relax_s seconds on, the sleeps grow to
     * relaxed_max_sleep_us instead (a wait that long is a late rank or a
     * slow link, where a little more latency costs nothing and the core is
     * worth more) */
    double relax_s;
    long relaxed_max_sleep_us;
    /* Limits in seconds; 0 turns either off. After warn_s it warns, once for
     * each multiple of warn_s it crosses (a poll that crosses several warns
     * once); after abort_s it logs the error and ends the job with
     * DIST_STALL_EXIT (dist_abort). */
    double warn_s, abort_s;
    /* Seconds on a monotonic clock; NULL: time_now (tests pass a fake). */
    double (*clock)(void);
} dist_wait_site;

/* Polls s->poll until it returns 1, warning and ending the job as the site
 * says; returns once the wait is over, after the "stall over" line when it
 * warned. Never returns an error: past abort_s it does not return. */
void dist_wait_until(const dist_wait_site *s);

/* A blocking call that cannot be polled (the gradient sum's MPI_Allreduce)
 * is bracketed by these: a monitor thread (started at dist_beats_attach or
 * the first begin) warns at every multiple of dist.stall_warn_s the call has
 * been inside, naming `call`, the calling thread's phase and the late ranks
 * the table names (below); end says "stall over" after such a warning, and
 * the thread ends the process when the call has not ended after
 * dist.stall_abort_s (mpirun then ends the job). While the table names a
 * late rank and the call has been inside for DIST_THROTTLE_AFTER_S, the
 * monitor keeps the calling thread paused (a signal whose handler sleeps)
 * for all but about 1 ms of every DIST_THROTTLE_PAUSE_MS, so a rank waiting
 * for a stopped one does not spin a core inside MPI; once no late rank is
 * named (it came back) the call runs at full speed again within a beat.
 * One such call at a time in the process. */
#define DIST_THROTTLE_AFTER_S 2.0
#define DIST_THROTTLE_PAUSE_MS 20
void dist_blocking_begin(const char *call);
void dist_blocking_end(void);

/* What the ranks tell each other about those calls, and whether they are
 * alive (dist/beats.c): a table of slots, one per rank of the job (indexed by
 * job rank), that the ranks of a node share (dist_init allocates it:
 * MPI_Win_allocate_shared over the node, then atomics only). A rank writes
 * its own slot; the slots of the ranks of other nodes are written by its
 * node's first rank from the UDP datagrams each rank sends the other nodes
 * once per beat (the relay). The monitor thread reads the table when it
 * warns, so the line names a late rank: one that has not entered the call
 * (alive), or one that has given no sign of life for a while (its process is
 * stopped or gone, or, on another node, its node cannot be reached). A slot
 * nothing was heard from is not used. The other waits' lines also name the
 * ranks that are alive but wait in nothing: in a stall, the ranks ahead end
 * up waiting in some collective, and the late one is busy elsewhere. */
#define DIST_WAITING_AFTER_S 0.2
typedef struct dist_beat {
    int64_t seq;       /* blocking calls entered */
    int64_t inside_ns; /* when it entered the current one (ns, this node's monotonic clock); 0: not inside */
    int64_t beat_ns;   /* its last sign of life, this node's clock: its monitor's beat, or its datagram taken */
    int64_t group;     /* 1 + its group (dist_split_servers: 0 workers, 1 servers); 0: nothing heard yet */
    int64_t waiting;   /* its threads in a wait (dist_wait_until) of DIST_WAITING_AFTER_S or more */
    int64_t pad[3];    /* a cache line each */
} dist_beat;

/* The table and the relay, as dist_init makes them (what the monitor reads). */
typedef struct dist_beats {
    dist_beat *slots;             /* [world], shared by the node's ranks; NULL: none */
    int world, mine;              /* job ranks: how many, and this one */
    const int *node_of;           /* [world] each rank's node (its first rank's job rank); NULL: one node */
    const char *const *host;      /* [world] each rank's host name, for the lines; NULL: none */
    int fd;                       /* the relay's UDP socket; -1: no relay (one node, or none could be made) */
    int receiver;                 /* this rank takes its node's datagrams (its node's first rank) */
    const struct sockaddr_in *dest; /* [n_dest] every address of every other node's first rank */
    int n_dest;
    uint64_t token;               /* the job's: datagrams without it are not ours */
} dist_beats;

/* Hands the table to the monitor thread (copied; the arrays it points to
 * must live until detached), and starts that thread when the job has more
 * than one rank, so every rank beats from start-up. NULL detaches (before
 * the memory goes; the socket stays open until the process ends). */
void dist_beats_attach(const dist_beats *t);
/* This rank's group, after dist_split_servers (0 workers, 1 servers). */
void dist_beats_set_group(int group);
/* For the other waits' lines (dist_wait_polled's sites, the watchdog):
 * appends to the text in buf (cap bytes in all) the ranks of this rank's
 * group that have given no sign of life for a while, or are alive and wait
 * in nothing, as "; on this node rank 1 has given no sign of life for 5 s:
 * ..." (nothing when none, or no room). Reads the table under the
 * monitor's lock. */
void dist_beats_note(char *buf, size_t cap);

/* The pieces (dist/beats.c), public for tests/test_wait.c. */
/* Names the late ranks of this rank's group into buf, "; <where> rank R has
 * ..." for each: silent for stale_s or more ("given no sign of life"); when
 * in_call, behind this rank's blocking call (fewer calls entered, or the
 * same number and not inside: "has not entered it"); otherwise alive and in
 * no wait and no blocking call ("is alive and waits in no collective").
 * Returns how many it named. */
int dist_beats_describe(const dist_beats *t, char *buf, size_t len, int64_t now_ns, double stale_s, int in_call);
/* This rank's slot as a datagram into out (cap bytes); its length, 0 when
 * it does not fit or there is no table. */
size_t dist_beat_pack(const dist_beats *t, int64_t now_ns, unsigned char *out, size_t cap);
/* Writes what a datagram says into the table, with now_ns as that rank's
 * beat; 1 if taken, 0 if dropped (not ours: length, magic, version, token;
 * or a rank out of range, of this node, or not of the node it says). */
int dist_beat_take(const dist_beats *t, const unsigned char *msg, size_t len, int64_t now_ns);
/* A UDP socket on every address, any port (nonblocking): its descriptor and
 * *port, or -1. */
int dist_beats_socket(uint16_t *port);
/* This host's IPv4 addresses that are up and not loopback (network byte
 * order), at most max; how many. */
int dist_beats_addresses(uint32_t *addr, int max);
/* Sends this rank's slot to every destination (best effort). */
void dist_beats_send(const dist_beats *t, int64_t now_ns);
/* Takes every datagram waiting on the socket (the receiver only); how many
 * were taken. */
int dist_beats_drain(const dist_beats *t, int64_t now_ns);

/* The limits dist_set_wait_limits set (0: off), for the sites that name the
 * ranks they wait for (dist/ps.c). */
void dist_wait_limits(double *warn_s, double *abort_s);

/* dist.progress as dist_set_progress set it. */
dist_progress dist_progress_mode(void);

#if CNT_HAVE_MPI
#include <mpi.h>

/* The communicator of the collectives: MPI_COMM_WORLD, or this rank's group
 * after dist_split_servers (dist/dist.h). */
MPI_Comm dist_comm(void);

/* How dist_wait_bounded pauses between polls once a 50 us spin has not seen
 * the requests complete. */
typedef enum dist_wait_mode {
    /* Sleep, from 10 us doubling to 1 ms: for the trainer's small
     * collectives, which complete within microseconds when every rank is
     * there; a longer wait means a late rank, and the waiting thread leaves
     * the cores to compute. */
    DIST_WAIT_SLEEP,
    /* sched_yield: the ring's chunks with dist.progress = spin. Like
     * MPI_Waitall (a spin that Open MPI makes yield on an oversubscribed
     * node), it lets a process sharing the core run, but takes whatever core
     * is free from backward's threads. */
    DIST_WAIT_YIELD,
    /* A 50 us spin, sched_yield to the first millisecond, then sleeps from
     * 10 us doubling to 50 us: the ring's chunks with dist.progress = sleep
     * (the default). A chunk through shared memory (ranks of one node) moves only while a
     * rank polls, and completes within the millisecond; one across a
     * network takes milliseconds (256 KiB: 0.4 ms at 5 Gbit/s, 2.1 ms at 1) and
     * moves in the kernel's and Open MPI's socket buffers while the thread
     * sleeps, so the rest of its wait leaves the cores to backward
     * (docs/scaling.md measures it). */
    DIST_WAIT_PACED
} dist_wait_mode;

/* Completes the n requests at reqs (MPI_REQUEST_NULL entries are fine) by
 * polling MPI_Testall in dist_wait_until, pausing as `mode` says, under the
 * limits of dist_set_wait_limits. `collective` names the dist/ function for
 * the messages ("dist_broadcast"); the phase is the calling thread's
 * (dist_phase): "stall: rank R has waited T s in <collective> during
 * <phase> for the other ranks" (a collective cannot know who is missing).
 * Past the abort limit it ends the job; MPI failures are fatal. */
void dist_wait_bounded(int n, MPI_Request *reqs, const char *collective, dist_wait_mode mode);
/* The same wait over any poll: poll(ctx) returns 1 once the wait is over
 * (it may do work: the ring's ops post their next messages in it). The
 * ring's sums in flight wait here (dist/ring.c). */
void dist_wait_polled(int (*poll)(void *ctx), void *ctx, const char *collective, dist_wait_mode mode);
#endif

#endif
