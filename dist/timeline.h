/*
 * dist/timeline.h - a Chrome-trace timeline of a training run (dist.timeline).
 *
 * Records complete events ("ph":"X": a name, a category, a thread and a start
 * and end time) while training runs, for every step or a window of steps
 * (timeline_set_window, dist.timeline_steps), cheaply: appending copies the event into
 * a growable array under a mutex, with no I/O. At the end every rank's events
 * are gathered to rank 0, which writes one JSON file that chrome://tracing and
 * Perfetto open: {"traceEvents":[...]}, one process per rank ("rank r", pid r)
 * with two threads, TIMELINE_TID_TRAIN ("train") and TIMELINE_TID_COMM
 * ("comm", the reducer's communication thread), and any others the caller
 * names (timeline_name_thread: a worker's track per parameter server).
 *
 * Parameter servers (dist/ps.h) keep their own timeline
 * (timeline_create_local: no collective, the servers are not in the
 * workers' group), spooled to their own parts as workers' are; at the end
 * each sends its events to rank 0, with its times moved onto rank 0's axis
 * by a clock offset that rank 0 measures with a few round trips after its
 * goodbye (good to half the fastest), rank 0 adds them to its file
 * (timeline_events_text, timeline_add_text), and the server removes its
 * part once rank 0 says the trace is written (timeline_remove_part).
 *
 * Clocks: each rank's zero is taken right after a barrier in timeline_create,
 * so the ranks' time axes agree to within a barrier's skew - good enough to
 * see overlap, not to measure message latencies. Times are host wall-clock
 * (time_now()); with an asynchronous device backend they show when work was
 * issued rather than when it ran.
 */
#ifndef CNT_TIMELINE_H
#define CNT_TIMELINE_H

#include <stddef.h>

enum { TIMELINE_TID_TRAIN = 0, TIMELINE_TID_COMM = 1 };

typedef struct timeline timeline;

/* A collective (every rank calls it: it holds a barrier, then takes this
 * rank's zero time). Never fails; allocation and mutex failures are fatal. */
timeline *timeline_create(void);
/* The same without the barrier: one process's own timeline, zero now. */
timeline *timeline_create_local(void);
/* The zero (time_now() seconds) that event times are counted from. */
double timeline_zero(const timeline *tl);
/* Names track tid (0 .. 7) in the trace; "train" and "comm" are named already. */
void timeline_name_thread(timeline *tl, int tid, const char *name);
/* This process's events as trace elements (each preceded by ",\n") under
 * process id pid named `process`, times counted from zero (this process's
 * time_now() seconds). Returns a malloc'd text of *len bytes (no NUL). A
 * spooled timeline gives its part's events (under the pid and name it was
 * spooled with) and closes the part, which stays on disk until
 * timeline_remove_part. */
char *timeline_events_text(timeline *tl, int pid, const char *process, double zero, size_t *len);
/* Removes the closed spool part (timeline_events_text), once what it held
 * is in a written trace. */
void timeline_remove_part(timeline *tl);
/* Rank 0: another process's timeline_events_text, written with its own. */
void timeline_add_text(timeline *tl, const char *text, size_t len);
/* Spools this process's events to `path` (one trace element a line: its
 * metadata, then every event) at each step boundary (timeline_set_step), so
 * memory holds one step's events and a run that is killed or fails leaves
 * its events on disk as far as its last step boundary; tools/plot_timeline.py
 * reads such parts. pid and process name the process in them. Call once,
 * before any event. timeline_write removes the part once the trace is
 * written. CNT_ERR naming the file when it cannot be created. */
int timeline_spool(timeline *tl, const char *path, int pid, const char *process);
/* Whether the part at path is being spooled by a live process (each holds
 * an flock on its part; where the file system has no flock, 0). */
int timeline_part_in_use(const char *path);
/* Records only the events of steps [first, last] (as timeline_set_step
 * says them); others are dropped as they come, so memory stays bounded.
 * Default: every step. */
void timeline_set_window(timeline *tl, long first, long last);
/* The step stamped (as args.step) on events recorded from now on; called by
 * the training thread at the start of each step. */
void timeline_set_step(timeline *tl, long step);
/* Appends one event: t_start and t_end are time_now() seconds. name is
 * copied (truncated to 127 bytes); cat must be a string literal (kept as a
 * pointer). Safe from any thread. Never fails (allocation failure is fatal). */
void timeline_record(timeline *tl, const char *name, const char *cat, int tid, double t_start, double t_end);
/* A collective: gathers every rank's events (read back from its spool file
 * when it has one) to rank 0, which writes the trace to `path` (through
 * path.tmp and a rename, so a reader never sees half a file); then every
 * rank removes its spool file, unless the trace could not be written.
 * Returns CNT_OK, or on rank 0 CNT_ERR with a message when the file cannot
 * be written (the other ranks return CNT_OK). A rank whose spool cannot be
 * read back warns and sends nothing. */
int timeline_write(timeline *tl, const char *path);
/* A flow arrow (Chrome trace "s"/"f" events) from track tid_from at t_from
 * to track tid_to at t_to, in this rank's process: what caused what (a
 * bucket's last gradient and its allreduce). name is copied as for events. */
void timeline_flow(timeline *tl, const char *name, int tid_from, double t_from, int tid_to, double t_to);
/* Number of events this rank recorded (for tests and logs). */
long timeline_count(timeline *tl);
void timeline_free(timeline *tl);

#endif
