/*
 * tests/support/mpi_check.h - checks for the programs that tests/test_*.sh run
 * under mpirun (tests/mpi_*.c): every rank calls each check, the ranks agree
 * on whether it failed anywhere, rank 0 prints "ok   NAME" or
 * "FAIL NAME (on N rank(s))", and other ranks print their own failures on
 * stderr.
 */
#ifndef CNT_TESTS_MPI_CHECK_H
#define CNT_TESTS_MPI_CHECK_H

/* One check (a collective). */
void tu_mpi_check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Checks that failed on this rank or on another one, so far. */
int tu_mpi_failures(void);

#endif
