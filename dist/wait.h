/*
 * dist/wait.h - bounded waits on MPI requests, for dist/ sources only
 * (dist.c, ring.c). The public side (dist_set_wait_limits, dist_phase) is in
 * dist/dist.h; this header needs mpi.h, which only dist/ includes.
 */
#ifndef CNT_DIST_WAIT_H
#define CNT_DIST_WAIT_H

/* A blocking call that cannot be polled (the gradient sum's MPI_Allreduce)
 * is bracketed by these: a monitor thread (started at the first begin) ends
 * the process with a message naming `call` and the calling thread's phase
 * when the call has not ended after dist.stall_abort_s (mpirun then ends the
 * job). One such call at a time in the process. */
void dist_blocking_begin(const char *call);
/* The limits dist_set_wait_limits set (0: off), for waits that poll on their
 * own (dist/ps.c, which names the ranks it waits for). */
void dist_wait_limits(double *warn_s, double *abort_s);
void dist_blocking_end(void);

#if CNT_HAVE_MPI
#include <mpi.h>

/* The communicator of the collectives: MPI_COMM_WORLD, or this rank's group
 * after dist_split_servers (dist/dist.h). */
MPI_Comm dist_comm(void);

/* What dist_wait_bounded does between polls once a 50 us spin has not seen
 * the requests complete. */
typedef enum dist_wait_mode {
    /* Sleep, from 10 us doubling to 1 ms: for the trainer's small
     * collectives, which complete within microseconds when every rank is
     * there; a longer wait means a late rank, and the waiting thread leaves
     * the cores to compute. */
    DIST_WAIT_SLEEP,
    /* sched_yield: for the ring's chunks, whose data moves only while a rank
     * polls, so a sleep would slow every gradient allreduce. Like MPI_Waitall
     * (a spin that Open MPI makes yield on an oversubscribed node), it lets a
     * process sharing the core, such as the neighbour rank, run. */
    DIST_WAIT_YIELD
} dist_wait_mode;

/* Completes the n requests at reqs (MPI_REQUEST_NULL entries are fine) by
 * polling MPI_Testall as `mode` says. `collective` names the dist/ function
 * for the messages ("dist_broadcast"); the phase is the calling thread's
 * (dist_phase). After the warn limit (and every further multiple) it logs a
 * warning; after the abort limit an error, then ends the job (dist_abort);
 * see dist_set_wait_limits in dist/dist.h. MPI failures are fatal. */
void dist_wait_bounded(int n, MPI_Request *reqs, const char *collective, dist_wait_mode mode);
#endif

#endif
