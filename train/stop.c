/*
 * train/stop.c - the stop signals' handler (see train/stop.h).
 */
#include "train/stop.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dist/dist.h"

static volatile sig_atomic_t pending = 0;
static const int stop_signals[] = {SIGTERM, SIGINT, SIGUSR1};
#define N_STOP ((int)(sizeof stop_signals / sizeof stop_signals[0]))
static struct sigaction previous[N_STOP];
static int installed = 0;
/* What the handler writes at once (rank 0 only), made by stop_install:
 * write(2) is async-signal-safe, snprintf is not. */
static char said[N_STOP][160];
static size_t said_len[N_STOP];

static void on_signal(int sig) {
    if (pending) {
        /* the second one: the default action, now */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    pending = sig;
    for (int i = 0; i < N_STOP; i++)
        if (stop_signals[i] == sig && said_len[i] && write(2, said[i], said_len[i]) < 0) {
            /* nothing to do: the last line says it anyway */
        }
}

void stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads, writes and waits go on; the step loop looks at the flag */
    int announce = dist_job_rank() == 0;
    for (int i = 0; i < N_STOP; i++) {
        int n = snprintf(said[i], sizeof said[i],
                         "%s: stopping at the next step boundary, with a checkpoint, exit 75 (a second %s ends the "
                         "process at once)\n",
                         stop_signal_name(stop_signals[i]), stop_signal_name(stop_signals[i]));
        said_len[i] = announce && n > 0 && (size_t)n < sizeof said[i] ? (size_t)n : 0;
    }
    for (int i = 0; i < N_STOP; i++) sigaction(stop_signals[i], &sa, &previous[i]);
    pending = 0;
    installed = 1;
}

void stop_restore(void) {
    if (!installed) return;
    for (int i = 0; i < N_STOP; i++) sigaction(stop_signals[i], &previous[i], NULL);
    installed = 0;
}

int stop_pending(void) { return pending; }

const char *stop_signal_name(int sig) {
    static char buf[32];
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: snprintf(buf, sizeof buf, "signal %d", sig); return buf;
    }
}
