/*
 * spin.h - how long a client waiting for an answer polls before it sleeps
 * (spin.c).
 */
#ifndef CUBE_CLIENT_SPIN_H
#define CUBE_CLIENT_SPIN_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

#define CUBE__SPIN_APART_US 1000u       /* the budget, client and daemon on CPUs of their own */
#define CUBE__SPIN_SHARED_US 50u        /* the budget where they may meet on a CPU */
#define CUBE__SPIN_MAX_US 10000u        /* the most $CUBE_CLIENT_SPIN_US sets */
#define CUBE__SPIN_MIN_US 50u           /* a wait polls at least this long, within the budget */

/* A connection's polling: set once at connect, then used by whichever
 * thread reads for everyone (rpc.c), one at a time. */
typedef struct cube__spin {
        uint64_t budget_ns;             /* the most a wait polls; 0: never poll, sleep at once */
        uint64_t expect_ns;             /* how long this connection's answers lately took */
        uint64_t polled_ns;             /* how long the last wait polled (0: it slept at once) */
} cube__spin;

/* How long a client that may run on mine may poll for a daemon that may
 * run on daemon (NULL: not known), in us: 0, CUBE__SPIN_SHARED_US or
 * CUBE__SPIN_APART_US. */
unsigned cube__spin_budget_us(const cpu_set_t *mine, const cpu_set_t *daemon);
/* Decides the polling of the connection on fd (a Unix socket to cubed),
 * from the caller's CPUs, the daemon's and $CUBE_CLIENT_SPIN_US. */
void cube__spin_init(cube__spin *s, int fd);
/* Waits until fd is readable: polls it first where that pays, then sleeps
 * in poll. 0, or a negative errno (EINTR among them). */
int cube__spin_wait(cube__spin *s, int fd);

#endif
