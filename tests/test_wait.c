/*
 * tests/test_wait.c - the one bounded wait of dist/ (dist_wait_until,
 * dist/wait.h), with a fake poll function that completes after N polls or
 * never and, where the limits matter, a fake clock that each poll advances,
 * so the warnings fall at known polls:
 *   - a wait that is over at the first poll reads no clock and says nothing;
 *   - a wait polls until it is over, without pausing while it spins;
 *   - the warning names what the late-ranks callback says, once per multiple
 *     of the warn limit crossed (a poll that crosses three warns once), and
 *     the wait ends with one "stall over" line;
 *   - past the abort limit it logs the error naming the late ranks and ends
 *     the process with DIST_STALL_EXIT (in a forked child);
 *   - a signal during a sleep (EINTR) neither ends the wait nor turns the
 *     sleeps into a spin: the sleep goes on for what is left of it;
 *   - yield_s: yields and no sleep until then, sleeps after.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/timer.h"
#include "dist/wait.h"

/* ------------------------------------------------ the fake poll and clock */

static double fake_now;
static int clock_reads;

static double fake_clock(void) {
    clock_reads++;
    return fake_now;
}

typedef struct fake {
    int polls;         /* made so far */
    int done_after;    /* the poll that completes it; 0: never */
    double step_s;     /* fake seconds each poll takes */
    int jump_poll;     /* this poll takes jump_s more */
    double jump_s;
    int described[3];  /* describe calls per part */
} fake;

static int fake_poll(void *ctx) {
    fake *f = ctx;
    f->polls++;
    fake_now += f->step_s + (f->polls == f->jump_poll ? f->jump_s : 0);
    return f->done_after > 0 && f->polls >= f->done_after;
}

static void fake_describe(void *ctx, dist_wait_text part, char *buf, size_t cap) {
    fake *f = ctx;
    f->described[part]++;
    snprintf(buf, cap, "%s",
             part == DIST_WAIT_WHO ? "rank 7" : part == DIST_WAIT_LATE ? "for rank(s) 2, 5" : "the fake completed");
}

static dist_wait_site fake_site(fake *f) {
    dist_wait_site s = {.poll = fake_poll,
                        .describe = fake_describe,
                        .ctx = f,
                        .warn_note = " (warn note)",
                        .abort_note = " (abort note)",
                        .max_sleep_us = 1,
                        .clock = fake_clock};
    return s;
}

/* ------------------------------------------------ stderr into a string */

static int saved_fd = -1;
static FILE *capture;

static void capture_begin(void) {
    fflush(stderr);
    capture = tmpfile();
    assert_non_null(capture);
    saved_fd = dup(2);
    assert_true(saved_fd >= 0);
    assert_int_equal(dup2(fileno(capture), 2), 2);
}

/* What was written to stderr since capture_begin (static buffer). */
static const char *capture_end(void) {
    static char text[8192];
    fflush(stderr);
    assert_int_equal(dup2(saved_fd, 2), 2);
    close(saved_fd);
    rewind(capture);
    size_t n = fread(text, 1, sizeof text - 1, capture);
    text[n] = '\0';
    fclose(capture);
    return text;
}

static int count_lines(const char *text, const char *prefix) {
    int n = 0;
    for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
        n += strncmp(l, prefix, strlen(prefix)) == 0;
    return n;
}

/* ------------------------------------------------ the tests */

static void test_over_at_once(void **state) {
    (void)state;
    fake f = {.done_after = 1};
    dist_wait_site s = fake_site(&f);
    s.warn_s = 1;
    s.abort_s = 2;
    clock_reads = 0;
    capture_begin();
    dist_wait_until(&s);
    assert_string_equal(capture_end(), "");
    assert_int_equal(f.polls, 1);
    assert_int_equal(clock_reads, 0);
    assert_int_equal(f.described[DIST_WAIT_WHO] + f.described[DIST_WAIT_LATE] + f.described[DIST_WAIT_OVER], 0);
}

/* 2000 polls inside the spin: no sleep (10 us doubling to 100 ms would take
 * minutes), no line. With the real clock. */
static void test_spins_without_pausing(void **state) {
    (void)state;
    for (int by_time = 0; by_time < 2; by_time++) {
        fake f = {.done_after = 2000};
        dist_wait_site s = fake_site(&f);
        s.clock = NULL;
        s.max_sleep_us = 100000;
        if (by_time)
            s.spin_s = 60;
        else
            s.spin_polls = 2000;
        double t0 = time_now();
        capture_begin();
        dist_wait_until(&s);
        assert_string_equal(capture_end(), "");
        assert_int_equal(f.polls, 2000);
        assert_true(time_now() - t0 < 0.5);
    }
}

/* yield_s (the ring's DIST_WAIT_PACED): after the spin, polls with a yield
 * and no sleep until yield_s: 500 polls well inside a minute's yield_s take
 * no sleep (at 2 ms a sleep they would take a second); then sleeps. */
static void test_yields_before_sleeping(void **state) {
    (void)state;
    fake f = {.done_after = 500};
    dist_wait_site s = fake_site(&f);
    s.clock = NULL;
    s.max_sleep_us = 2000;
    s.yield_s = 60;
    double t0 = time_now();
    dist_wait_until(&s);
    assert_int_equal(f.polls, 500);
    assert_true(time_now() - t0 < 0.3);
    /* past yield_s, the sleeps: 20 polls of at least 10 us each */
    fake g = {.done_after = 20};
    s = fake_site(&g);
    s.clock = NULL;
    s.max_sleep_us = 2000;
    s.yield_s = 1e-9;
    t0 = time_now();
    dist_wait_until(&s);
    assert_true(time_now() - t0 >= 19 * 10e-6);
}

/* relax_s (the ring's DIST_WAIT_PACED): a wait that has gone on that long
 * sleeps up to relaxed_max_sleep_us instead of max_sleep_us, so a long wait
 * (a late rank, a slow link) takes little of a core. 15 polls with a 50 us
 * cap take about 1 ms; relaxed from the start to 20 ms, the sleeps double
 * from 10 us to 20 ms: over 60 ms. */
static void test_relaxes_after_a_long_wait(void **state) {
    (void)state;
    double took[2];
    for (int relaxed = 0; relaxed < 2; relaxed++) {
        fake f = {.done_after = 15};
        dist_wait_site s = fake_site(&f);
        s.clock = NULL;
        s.max_sleep_us = 50;
        s.relax_s = relaxed ? 1e-9 : 60;
        s.relaxed_max_sleep_us = 20000;
        double t0 = time_now();
        dist_wait_until(&s);
        took[relaxed] = time_now() - t0;
        assert_int_equal(f.polls, 15);
    }
    assert_true(took[0] < 0.06);
    assert_true(took[1] > 0.06);
}

/* Fake time: poll k ends at 0.25 k s, and poll 10 takes 3 s more; the clock
 * starts after poll 1, so poll k has waited 0.25 (k - 1) s, 3 s more from
 * poll 10 on. Warn limit 1 s: poll 5 (1 s) and poll 9 (2 s) warn; poll 10
 * (5.25 s) crosses 3, 4 and 5 and warns once; polls 11 and 12 (5.5, 5.75 s)
 * are short of 6; poll 13 completes it, after 6 s. */
static void test_warn_rearm_and_over(void **state) {
    (void)state;
    fake_now = 0;
    fake f = {.done_after = 13, .step_s = 0.25, .jump_poll = 10, .jump_s = 3};
    dist_wait_site s = fake_site(&f);
    s.warn_s = 1;
    s.abort_s = 100;
    capture_begin();
    dist_wait_until(&s);
    const char *out = capture_end();
    assert_int_equal(f.polls, 13);
    assert_string_equal(out, "warning: stall: rank 7 has waited 1 s for rank(s) 2, 5 (warn note)\n"
                             "warning: stall: rank 7 has waited 2 s for rank(s) 2, 5 (warn note)\n"
                             "warning: stall: rank 7 has waited 5 s for rank(s) 2, 5 (warn note)\n"
                             "warning: stall over: the fake completed after 6.0 s\n");
    assert_int_equal(f.described[DIST_WAIT_LATE], 3);
    assert_int_equal(f.described[DIST_WAIT_OVER], 1);
    assert_int_equal(count_lines(out, "warning: stall over:"), 1);
}

/* Limits off: a long wait says nothing. */
static void test_limits_off(void **state) {
    (void)state;
    fake_now = 0;
    fake f = {.done_after = 200, .step_s = 10};
    dist_wait_site s = fake_site(&f);
    capture_begin();
    dist_wait_until(&s);
    assert_string_equal(capture_end(), "");
    assert_int_equal(f.polls, 200);
}

/* A wait that never ends, in a child: warnings at 1 and 2 s, the error at
 * 2.5 s (poll 11), exit status DIST_STALL_EXIT. */
static void test_abort_ends_the_process(void **state) {
    (void)state;
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fake_now = 0;
        fake f = {.done_after = 0, .step_s = 0.25};
        dist_wait_site s = fake_site(&f);
        s.warn_s = 1;
        s.abort_s = 2.5;
        dist_wait_until(&s);
        _exit(99); /* not reached */
    }
    close(fd[1]);
    char out[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof out - 1 && (r = read(fd[0], out + n, sizeof out - 1 - n)) > 0) n += (size_t)r;
    out[n] = '\0';
    close(fd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), DIST_STALL_EXIT);
    assert_string_equal(out, "warning: stall: rank 7 has waited 1 s for rank(s) 2, 5 (warn note)\n"
                             "warning: stall: rank 7 has waited 2 s for rank(s) 2, 5 (warn note)\n"
                             "error: stall: rank 7 has waited 2 s for rank(s) 2, 5 (abort note); ending the job "
                             "(dist.stall_abort_s = 2.5: raise it if that can legitimately take longer)\n");
}

/* A signal every 200 us while the wait sleeps (up to 20 ms a sleep) for
 * 150 ms of real time: the sleeps go on after each interruption, so the
 * polls stay few (about 10 sleeps double to the cap, then a handful of
 * 20 ms ones); a sleep that returned at every signal would poll hundreds of
 * times. */
static atomic_int signals_seen;
static atomic_int stop_signalling;

static void on_signal(int sig) {
    (void)sig;
    atomic_fetch_add(&signals_seen, 1);
}

static void *signaller(void *arg) {
    pthread_t target = *(pthread_t *)arg;
    while (!atomic_load(&stop_signalling)) {
        pthread_kill(target, SIGUSR1);
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

typedef struct timed {
    double until;
    int polls;
} timed;

static int timed_poll(void *ctx) {
    timed *t = ctx;
    t->polls++;
    return time_now() >= t->until;
}

static void timed_describe(void *ctx, dist_wait_text part, char *buf, size_t cap) {
    (void)ctx;
    (void)part;
    snprintf(buf, cap, "?");
}

static void test_signal_during_sleep(void **state) {
    (void)state;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* as train/stop.c: nanosleep returns EINTR all the same */
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    atomic_store(&signals_seen, 0);
    atomic_store(&stop_signalling, 0);
    pthread_t self = pthread_self(), th;
    assert_int_equal(pthread_create(&th, NULL, signaller, &self), 0);

    timed t = {.until = time_now() + 0.15};
    dist_wait_site s = {.poll = timed_poll, .describe = timed_describe, .ctx = &t, .max_sleep_us = 20000};
    dist_wait_until(&s);
    double late = time_now() - t.until;

    atomic_store(&stop_signalling, 1);
    pthread_join(th, NULL);
    sigaction(SIGUSR1, &old, NULL);
    print_message("    %d signals, %d polls, ended %.1f ms after the deadline\n", atomic_load(&signals_seen), t.polls,
                  late * 1e3);
    assert_true(atomic_load(&signals_seen) >= 20);
    assert_true(t.polls <= 40);
    assert_true(late >= 0);
}


/* ------------------------------------------------ the table and the relay */

/* 4 ranks on 2 nodes (0, 1 on "alpha", whose first rank is 0; 2, 3 on
 * "beta"), seen from rank 0. */
static const int four_nodes[4] = {0, 0, 2, 2};
static const char *const four_hosts[4] = {"alpha", "alpha", "beta", "beta"};

static dist_beats four_table(dist_beat *slots, int mine) {
    memset(slots, 0, 4 * sizeof *slots);
    dist_beats t = {.slots = slots, .world = 4, .mine = mine, .node_of = four_nodes, .host = four_hosts, .fd = -1,
                    .token = 0x5eedULL};
    return t;
}

static const int64_t S = 1000000000; /* ns */

static void test_describe_names_late_ranks(void **state) {
    (void)state;
    dist_beat slots[4];
    dist_beats t = four_table(slots, 0);
    int64_t now = 100 * S;
    slots[0] = (dist_beat){.seq = 3, .inside_ns = 95 * S, .beat_ns = now, .group = 1};
    slots[1] = (dist_beat){.seq = 3, .inside_ns = 95 * S, .beat_ns = now - S / 2, .group = 1}; /* inside, alive */
    slots[2] = (dist_beat){.seq = 3, .inside_ns = 95 * S, .beat_ns = now - 10 * S, .group = 1}; /* silent 10 s */
    slots[3] = (dist_beat){.seq = 2, .inside_ns = 0, .beat_ns = now - S, .group = 1};           /* behind */
    char buf[1024];
    assert_int_equal(dist_beats_describe(&t, buf, sizeof buf, now, 4.0, 1), 2);
    assert_string_equal(buf, "; on beta rank 2 has given no sign of life for 10 s: its process is stopped or gone, or "
                             "its node cannot be reached; on beta rank 3 has not entered it, its process alive");
    /* outside a blocking call: silence, and a rank alive in no wait and no
     * blocking call (rank 3 until it waits; rank 1 is inside a call) */
    assert_int_equal(dist_beats_describe(&t, buf, sizeof buf, now, 4.0, 0), 2);
    assert_string_equal(buf, "; on beta rank 2 has given no sign of life for 10 s: its process is stopped or gone, or "
                             "its node cannot be reached; on beta rank 3 is alive and waits in no collective "
                             "(computing, loading data, or stuck outside the collectives)");
    slots[3].waiting = 1;
    assert_int_equal(dist_beats_describe(&t, buf, sizeof buf, now, 4.0, 0), 1);
    assert_string_equal(buf, "; on beta rank 2 has given no sign of life for 10 s: its process is stopped or gone, or "
                             "its node cannot be reached");
    slots[3].waiting = 0;
    /* a rank of this node: no talk of reaching it; the same number of calls but not inside: not entered */
    slots[1].beat_ns = now - 5 * S;
    slots[3] = (dist_beat){.seq = 3, .inside_ns = 0, .beat_ns = now, .group = 1};
    assert_int_equal(dist_beats_describe(&t, buf, sizeof buf, now, 4.0, 1), 3);
    assert_string_equal(buf, "; on this node rank 1 has given no sign of life for 5 s: its process is stopped or gone"
                             "; on beta rank 2 has given no sign of life for 10 s: its process is stopped or gone, or "
                             "its node cannot be reached; on beta rank 3 has not entered it, its process alive");
    /* nothing heard (group 0), or the other group (servers): never named */
    slots[1].group = 0;
    slots[2].group = 2;
    slots[3].group = 2;
    assert_int_equal(dist_beats_describe(&t, buf, sizeof buf, now, 4.0, 1), 0);
    assert_string_equal(buf, "");
    /* a small buffer is cut, never overrun */
    slots[2].group = 1;
    char small[16];
    assert_int_equal(dist_beats_describe(&t, small, sizeof small, now, 4.0, 1), 1);
    assert_int_equal(strlen(small), sizeof small - 1);
}

static void test_datagram_round_trip(void **state) {
    (void)state;
    dist_beat from_slots[4], to_slots[4];
    dist_beats from = four_table(from_slots, 3), to = four_table(to_slots, 0);
    from_slots[3] = (dist_beat){.seq = 7, .inside_ns = 40 * S, .beat_ns = 41 * S, .group = 2, .waiting = 2};
    unsigned char msg[128];
    size_t n = dist_beat_pack(&from, 42 * S, msg, sizeof msg); /* inside for 2 s on its clock */
    assert_true(n > 0 && n <= sizeof msg);
    assert_int_equal(dist_beat_pack(&from, 42 * S, msg, n - 1), 0);
    /* the receiver's clock is another: ages carry over, times do not */
    assert_int_equal(dist_beat_take(&to, msg, n, 500 * S), 1);
    assert_int_equal(to_slots[3].seq, 7);
    assert_int_equal(to_slots[3].group, 2);
    assert_int_equal(to_slots[3].waiting, 2);
    assert_true(to_slots[3].inside_ns == 498 * S);
    assert_true(to_slots[3].beat_ns == 500 * S);
    /* not inside: inside_ns 0 */
    from_slots[3].inside_ns = 0;
    n = dist_beat_pack(&from, 43 * S, msg, sizeof msg);
    assert_int_equal(dist_beat_take(&to, msg, n, 501 * S), 1);
    assert_true(to_slots[3].inside_ns == 0);

    /* dropped, and the slot untouched: a length, a token, a rank of the
     * receiver's own node, a rank out of range, a node that is not the rank's */
    dist_beat before = to_slots[3];
    assert_int_equal(dist_beat_take(&to, msg, n - 1, 600 * S), 0);
    unsigned char bad[128];
    dist_beats other_job = from;
    other_job.token = 0xbadULL;
    assert_int_equal(dist_beat_take(&to, bad, dist_beat_pack(&other_job, 43 * S, bad, sizeof bad), 600 * S), 0);
    dist_beat mine_slots[4];
    dist_beats same_node = four_table(mine_slots, 1); /* rank 1 is on the receiver's node */
    mine_slots[1] = (dist_beat){.seq = 9, .beat_ns = 1, .group = 1};
    assert_int_equal(dist_beat_take(&to, bad, dist_beat_pack(&same_node, 43 * S, bad, sizeof bad), 600 * S), 0);
    dist_beats out_of_range = from;
    out_of_range.mine = 4;
    int nodes5[5] = {0, 0, 2, 2, 2};
    out_of_range.node_of = nodes5;
    dist_beat slots5[5] = {0};
    out_of_range.slots = slots5;
    slots5[4].group = 1;
    assert_int_equal(dist_beat_take(&to, bad, dist_beat_pack(&out_of_range, 43 * S, bad, sizeof bad), 600 * S), 0);
    dist_beats wrong_node = from;
    int nodes_wrong[4] = {0, 0, 2, 1};
    wrong_node.node_of = nodes_wrong;
    assert_int_equal(dist_beat_take(&to, bad, dist_beat_pack(&wrong_node, 43 * S, bad, sizeof bad), 600 * S), 0);
    assert_memory_equal(&to_slots[3], &before, sizeof before);
    assert_int_equal(to_slots[1].seq, 0);
}

/* Over a real UDP socket on the loopback: what one rank sends, the other's
 * first rank takes. */
static void test_relay_over_udp(void **state) {
    (void)state;
    uint16_t port_to = 0, port_from = 0;
    int fd_to = dist_beats_socket(&port_to), fd_from = dist_beats_socket(&port_from);
    assert_true(fd_to >= 0 && fd_from >= 0 && port_to != 0);
    uint32_t addrs[4];
    int naddr = dist_beats_addresses(addrs, 4);
    assert_true(naddr >= 0 && naddr <= 4);
    dist_beat from_slots[4], to_slots[4];
    dist_beats from = four_table(from_slots, 2), to = four_table(to_slots, 1);
    struct sockaddr_in dest = {.sin_family = AF_INET, .sin_port = htons(port_to), .sin_addr.s_addr = htonl(0x7f000001)};
    from.fd = fd_from;
    from.dest = &dest;
    from.n_dest = 1;
    to.fd = fd_to;
    to.receiver = 1;
    from_slots[2] = (dist_beat){.seq = 5, .beat_ns = 1, .group = 1};
    dist_beats_send(&from, 10 * S);
    int taken = 0;
    for (int i = 0; i < 200 && !taken; i++) {
        taken = dist_beats_drain(&to, 20 * S);
        if (!taken) usleep(5000);
    }
    assert_int_equal(taken, 1);
    assert_int_equal(to_slots[2].seq, 5);
    assert_true(to_slots[2].beat_ns == 20 * S);
    /* not the receiver: takes nothing */
    to.receiver = 0;
    dist_beats_send(&from, 11 * S);
    usleep(20000);
    assert_int_equal(dist_beats_drain(&to, 30 * S), 0);
    close(fd_to);
    close(fd_from);
}

/* A wait that lasts counts in the rank's slot while it lasts (what the
 * others' lines read: a rank that waits is not the late one); a short one
 * never does. */
static dist_beat *marked_slot;
typedef struct marked_ctx {
    double until;
    int64_t seen_max;
} marked_ctx;

static int marked_poll(void *ctx) {
    marked_ctx *m = ctx;
    int64_t w = __atomic_load_n(&marked_slot->waiting, __ATOMIC_ACQUIRE);
    if (w > m->seen_max) m->seen_max = w;
    return time_now() >= m->until;
}

static void test_a_long_wait_counts_in_the_slot(void **state) {
    (void)state;
    static dist_beat slots[1];
    memset(slots, 0, sizeof slots);
    dist_beats t = {.slots = slots, .world = 1, .mine = 0, .fd = -1};
    dist_beats_attach(&t);
    marked_slot = &slots[0];
    for (int lasting = 0; lasting < 2; lasting++) {
        marked_ctx m = {.until = time_now() + (lasting ? DIST_WAITING_AFTER_S + 0.15 : DIST_WAITING_AFTER_S / 4)};
        dist_wait_site s = {.poll = marked_poll, .describe = timed_describe, .ctx = &m, .max_sleep_us = 1000};
        dist_wait_until(&s);
        assert_int_equal(m.seen_max, lasting);
        assert_int_equal(slots[0].waiting, 0);
    }
    dist_beats_attach(NULL);
}

/* The throttle: a thread inside a blocking call while the table names a late
 * rank (rank 1, silent since long ago) runs a small share of the time once
 * the call has been inside DIST_THROTTLE_AFTER_S; here it spins on the clock
 * as Open MPI does. Its CPU time from 2.6 s to 4 s inside: well under half
 * (about 5%; without the throttle, all of it). */
static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_throttle_inside_a_stalled_call(void **state) {
    (void)state;
    static dist_beat slots[2];
    memset(slots, 0, sizeof slots);
    slots[1] = (dist_beat){.seq = 0, .beat_ns = 1, .group = 1}; /* heard from once, at the clock's start */
    dist_beats t = {.slots = slots, .world = 2, .mine = 0, .fd = -1};
    dist_set_wait_limits(60, 0);
    capture_begin();
    dist_beats_attach(&t);
    dist_blocking_begin("a fake call");
    double t0 = time_now(), cpu0 = 0, wall0 = 0;
    while (time_now() - t0 < 4.0) {
        if (wall0 == 0 && time_now() - t0 >= DIST_THROTTLE_AFTER_S + 0.6) {
            wall0 = time_now();
            cpu0 = thread_cpu_s();
        }
    }
    double share = (thread_cpu_s() - cpu0) / (time_now() - wall0);
    dist_blocking_end();
    dist_beats_attach(NULL);
    capture_end();
    print_message("    the thread inside ran %.0f%% of the time while throttled\n", 100 * share);
    assert_true(share < 0.4);
    /* once nothing is named, no throttle: the same spin runs all the time */
    dist_beats_attach(&t);
    slots[1].group = 0;
    dist_blocking_begin("a fake call");
    t0 = time_now();
    while (time_now() - t0 < DIST_THROTTLE_AFTER_S + 0.6) {
    }
    cpu0 = thread_cpu_s();
    wall0 = time_now();
    while (time_now() - wall0 < 0.8) {
    }
    share = (thread_cpu_s() - cpu0) / (time_now() - wall0);
    dist_blocking_end();
    dist_beats_attach(NULL);
    print_message("    ... and %.0f%% with no late rank named\n", 100 * share);
    assert_true(share > 0.5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_over_at_once),
        cmocka_unit_test(test_spins_without_pausing),
        cmocka_unit_test(test_warn_rearm_and_over),
        cmocka_unit_test(test_limits_off),
        cmocka_unit_test(test_abort_ends_the_process),
        cmocka_unit_test(test_signal_during_sleep),
        cmocka_unit_test(test_yields_before_sleeping),
        cmocka_unit_test(test_relaxes_after_a_long_wait),
        cmocka_unit_test(test_describe_names_late_ranks),
        cmocka_unit_test(test_datagram_round_trip),
        cmocka_unit_test(test_relay_over_udp),
        cmocka_unit_test(test_a_long_wait_counts_in_the_slot),
        cmocka_unit_test(test_throttle_inside_a_stalled_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
