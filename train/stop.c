/*
 * train/stop.c - the stop signals' handler (see train/stop.h).
 */
#include "train/stop.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t pending = 0;
static const int stop_signals[] = {SIGTERM, SIGINT, SIGUSR1};
#define N_STOP ((int)(sizeof stop_signals / sizeof stop_signals[0]))
static struct sigaction previous[N_STOP];
static int installed = 0;

static void on_signal(int sig) {
    if (pending) {
        /* the second one: the default action, now */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    pending = sig;
}

void stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads, writes and waits go on; the step loop looks at the flag */
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
