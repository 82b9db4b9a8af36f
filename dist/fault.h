/*
 * dist/fault.h - test-only fault injection: points in the training loop where
 * an environment variable makes one rank misbehave on purpose, so tests can
 * check that the other ranks notice and say so (tests/test_dist_train.sh).
 * Nothing here runs unless its variable is set.
 *
 * A fault is armed by a variable of the form RANK:STEP:VALUE (integers
 * RANK >= 0 and STEP >= 1, a number VALUE >= 0): rank RANK misbehaves at step
 * STEP, VALUE says how much; or RANK:PHASE:VALUE, at the phase the trainer
 * names with dist_phase (dist/dist.h). Each point reads its variable once, at
 * its first call. Steps are the numbers the trainer passes to exchange_begin
 * (its optimizer step, from 1, continued after a resume).
 *
 *   CNT_TEST_STALL=RANK:STEP:SECONDS     fault_stall_point: the rank sleeps
 *                                        SECONDS seconds at the start of STEP
 *   CNT_TEST_STALL_IN=RANK:PHASE:SECONDS fault_stall_in_point: the rank
 *                                        sleeps SECONDS seconds when it first
 *                                        names a phase whose name starts with
 *                                        PHASE ("evaluation", "start-up"),
 *                                        so before its first collective in it
 *
 * Errors: a malformed value is fatal (cnt_fatal: the whole job ends).
 * Threads: fault_stall_point on the training thread only;
 * fault_stall_in_point on any thread.
 */
#ifndef CNT_FAULT_H
#define CNT_FAULT_H

/* exchange_begin (dist/exchange.h) calls it at the start of each step of
 * an exchange that communicates (allreduce, parameter servers): on the
 * training thread, before backward, so the other ranks see this rank late. Logs a warning, then sleeps, when CNT_TEST_STALL
 * names this rank (dist_job_rank()) and step. */
void fault_stall_point(long step);

/* dist_phase calls it with the phase just named (on the naming thread).
 * Logs a warning, then sleeps, when CNT_TEST_STALL_IN names this rank and a
 * prefix of `phase`; only the first such phase of the process sleeps. */
void fault_stall_in_point(const char *phase);

#endif
