/*
 * train/stop.h - stopping a run cleanly on a signal: SIGTERM (how Slurm,
 * Kubernetes and cloud preemption stop jobs), SIGINT (Ctrl-C) and SIGUSR1
 * (Slurm's --signal, Open MPI's mpirun forwards it to every rank).
 *
 * stop_install's handler records the signal and, on job rank 0, says at
 * once that it was heard (one write(2) of a line stop_install made: "SIGINT:
 * stopping at the next step boundary, ..."); the trainer asks
 * stop_pending at each step boundary, the ranks agree (exchange_agree_stop), the
 * state is saved and the run ends with TRAINER_EXIT_STOPPED. A second signal
 * of those three, before the run got there, ends the process at once the
 * default way (the way to kill a run stuck outside the step loop).
 *
 * Threads: install and restore on the main thread; the handler may run on
 * any thread (it touches one sig_atomic_t).
 */
#ifndef CNT_STOP_H
#define CNT_STOP_H

/* The process's exit status after a signal stopped the run and its state was
 * saved (EX_TEMPFAIL of sysexits.h: "try again later"; schedulers requeue). */
#define TRAINER_EXIT_STOPPED 75

/* Installs the handler for SIGTERM, SIGINT and SIGUSR1 (remembering the
 * previous dispositions). */
void stop_install(void);
/* Puts the previous dispositions back. */
void stop_restore(void);
/* The signal number received since stop_install, or 0. */
int stop_pending(void);
/* "SIGTERM", "SIGINT", "SIGUSR1" or "signal N". */
const char *stop_signal_name(int sig);

#endif
