/*
 * harness.h - starting the real cubed for integration tests, and talking to
 * it both through libcubeclient and as a raw (possibly hostile) peer.
 */
#ifndef CUBE_TEST_HARNESS_H
#define CUBE_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <msgpack.h>

#include "cube.h"

typedef struct test_daemon {
        pid_t pid;
        char dir[64];
        char socket[96];
        char log[96];
        char cache[96];                 /* the kernel cache, --cache-dir */
} test_daemon;

/* Starts $CUBED_BIN on a fresh socket in a new temporary directory, with its
 * kernel cache in that directory and extra arguments (NULL-terminated, may be
 * NULL; a later --cache-dir wins), and waits for READY=1 on a fake
 * NOTIFY_SOCKET. $CUBE_TEST_WRAPPER (e.g. "valgrind ...") prefixes the
 * command. Returns 0, or -1 with the daemon's log printed. */
int test_daemon_start(test_daemon *d, const char *const *extra_args);
/* Like test_daemon_start, with a wrapper command (NULL-terminated). */
int test_daemon_start_wrapped(test_daemon *d, const char *const *wrapper,
                              const char *const *extra_args);
/* SIGTERM, then waits up to timeout_ms. Returns the exit status (0..255), or
 * -1 when it had to be killed or died of a signal. Removes the directory. */
int test_daemon_stop(test_daemon *d, int timeout_ms);
/* Whether the socket file still exists. */
bool test_daemon_socket_exists(const test_daemon *d);
/* Prints the daemon's stderr, for a failing test. */
void test_daemon_dump_log(const test_daemon *d);

/* n daemons (at most 8) as instances cpu0..cpu<n-1>, their sockets
 * cpuI.sock in one temporary directory (dir), so that they find each other
 * for collectives; extra arguments go to each. Returns 0, or -1 with every
 * one started so far stopped. */
typedef struct test_group {
        int n;
        char dir[64];
        test_daemon d[8];
} test_group;
int test_group_start(test_group *g, int n, const char *const *extra_args);
/* Stops every daemon still running (a pid of 0 is one already gone). */
void test_group_stop(test_group *g);

/* A connected raw socket, or -1. */
int raw_connect(const char *path);
int raw_send(int fd, const void *buf, size_t len);
/* Sends an sbuffer's bytes. */
int raw_send_sbuffer(int fd, msgpack_sbuffer *sb);
/* Sends the notification create [stream 1, memory, size]. */
void raw_send_create(int fd, uint64_t memory, uint64_t size);
/* Receives one whole message into up (msgpack_unpacked_destroy it), within
 * timeout_ms. Returns 1 on a message, 0 on EOF, -1 on timeout or error. */
int raw_recv(int fd, msgpack_unpacked *up, int timeout_ms);
/* Waits for EOF, discarding messages; true when the daemon closed it. */
bool raw_wait_closed(int fd, int timeout_ms);
/* Sends hello and checks the answer; returns the service nonce, or 0. */
uint64_t raw_hello(int fd);
/* The same, also giving the session id (memory ids are session << 40 | n). */
void raw_greet(int fd, uint64_t *ret_nonce, uint64_t *ret_session);

/* Fills buf with bytes from a seeded generator that never yields long runs. */
void fill_random(void *buf, size_t n, uint64_t seed);

/* Current daemon status through a fresh client; aborts the test on failure. */
cube_status status_of(const char *socket);
/* Polls until memory in use is want, within timeout_ms. */
bool wait_memory_in_use(const char *socket, uint64_t want, int timeout_ms);

/* Asserts e is NULL, printing the message otherwise. */
#define ck_ok(expr) do { \
        cube_error *e_ = (expr); \
        ck_assert_msg(e_ == NULL, "%s: %s", #expr, e_ ? cube_error_message(e_) : ""); \
} while (0)

#endif
