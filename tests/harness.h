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
 * command. Returns 0, or -1 with the daemon's log printed (the directory
 * and its log stay until test_daemon_stop). Whatever a test process leaves
 * running or on disk, a failing test's included, is killed and removed when
 * it exits; CUBE_TEST_LEAVE=1 keeps the directories. */
int test_daemon_start(test_daemon *d, const char *const *extra_args);
/* Like test_daemon_start, with a wrapper command (NULL-terminated). */
int test_daemon_start_wrapped(test_daemon *d, const char *const *wrapper,
                              const char *const *extra_args);
/* Like test_daemon_start, as user uid (through setpriv; the test runs as
 * root), in a directory that is uid's. */
int test_daemon_start_as(test_daemon *d, uid_t uid, const char *const *extra_args);
/* SIGTERM, then waits up to timeout_ms. Returns the exit status (0..255), or
 * -1 when it had to be killed, died of a signal or was no longer running.
 * Removes the directory. */
int test_daemon_stop(test_daemon *d, int timeout_ms);
/* Whether the socket file still exists. */
bool test_daemon_socket_exists(const test_daemon *d);
/* Prints the daemon's stderr, for a failing test. */
void test_daemon_dump_log(const test_daemon *d);
/* Closes every descriptor that came along with a received message
 * (SCM_RIGHTS): what a notify socket's sender passes (systemd-notify's
 * barrier) is not kept. */
struct msghdr;
void test_close_passed_fds(struct msghdr *mh);

/* The daemon of a suite that starts one for each test case. Check's fixtures
 * take no argument, so the fixtures below start and stop this one. */
extern test_daemon D;
/* Fixtures: D with no extra argument, or with --enable-fault-injection. */
void test_start_default(void);
void test_start_with_faults(void);
/* Stops D, asserting that it exited 0 and removed its socket. */
void test_stop_clean(void);

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
/* The same, asserting that each exited 0. */
void test_group_stop_clean(test_group *g);

/* A connected raw socket, or -1. */
int raw_connect(const char *path);
int raw_send(int fd, const void *buf, size_t len);
/* Sends an sbuffer's bytes. */
int raw_send_sbuffer(int fd, msgpack_sbuffer *sb);
/* Sends the notification create [stream 1, memory, size]. */
void raw_send_create(int fd, uint64_t memory, uint64_t size);
/* Registers source's entry as kernel id (the notification kernel). */
void raw_send_kernel(int fd, uint64_t id, const char *source, const char *entry);
/* Sends a write of len bytes of data to h on stream 1 (a notification). */
void raw_send_write(int fd, const cube_handle *h, const void *data, size_t len);
/* Sends request msgid of method on stream 1 over the one handle h:
 * [1, [h]], as read and check take it. */
void raw_send_on_handle(int fd, uint32_t msgid, const char *method, const cube_handle *h);
/* Receives one whole message into up (msgpack_unpacked_destroy it), within
 * timeout_ms. Returns 1 on a message, 0 on EOF, -1 on timeout or error. */
int raw_recv(int fd, msgpack_unpacked *up, int timeout_ms);
/* Waits for EOF, discarding messages; true when the daemon closed it. */
bool raw_wait_closed(int fd, int timeout_ms);
/* Sends hello and checks the answer; returns the service nonce, or 0. */
uint64_t raw_hello(int fd);
/* The same, also giving the session id (memory ids are session << 40 | n). */
void raw_greet(int fd, uint64_t *ret_nonce, uint64_t *ret_session);

/* The descriptor that last came with a message on fd (SCM_RIGHTS), taken:
 * the caller closes it. -1 when none came. */
int raw_take_fd(int fd);
/* Sends len bytes with the descriptor passed along (SCM_RIGHTS). */
int raw_send_fd(int fd, const void *buf, size_t len, int passed);
/* Asks for a staging region of size bytes on msgid; returns the region's
 * descriptor and sets *ret_id, or returns -1 and fills *ret_error with what
 * the daemon answered instead (when it answered). */
int raw_region(int fd, uint32_t msgid, uint64_t size, uint64_t *ret_id, cube_error **ret_error);
/* Sends a request whose params are a single array of n u64 values. */
void raw_send_request_u64(int fd, uint32_t msgid, const char *method, const uint64_t *v, size_t n);

/* A monotonic clock in milliseconds, and ms scaled by CUBE_TEST_TIMEOUT_MULT. */
long test_now_ms(void);
int test_scaled_ms(int ms);
/* The backend the suites run on (CUBE_TEST_BACKEND; "cpu" without it), and
 * the word its fault reports carry ("SEGV", "CUDA_ERROR"). */
const char *test_backend(void);
const char *test_fault_word(void);
/* ---- what a case needs of the device under test ----------------------------
 * Most cases hold on every backend. One that needs more says so where it is
 * registered (tcase_add_test_needing), and where the daemon under test lacks
 * it the case is not run: it is printed as "SKIP case: reason" on stdout,
 * which tools/count-tests.py counts as skipped. */
typedef enum test_need {
        /* Kernel bodies that run: their results, how long they take, the
         * faults they raise. The CUDA driver's test double runs none
         * (CUBE_TEST_DRIVER=double). */
        TEST_NEEDS_KERNEL_RUNS = 1 << 0,
        /* The CPU device itself (CUBE_TEST_BACKEND unset or "cpu"): its
         * fault reasons (SEGV), its 64-byte alignment, its compiler and
         * PoCL, its first dimension of cubes (a GPU's holds 2^31 - 1),
         * device memory that is the daemon's own, and an address
         * space of cubed's that holds no driver (the CUDA test double's
         * threads and mappings live inside cubed). */
        TEST_NEEDS_CPU_DEVICE = 1 << 1,
        /* A daemon run under valgrind, which a sanitizer's build cannot be
         * (CUBE_TEST_NO_VALGRIND). */
        TEST_NEEDS_VALGRIND = 1 << 2,
        /* The CUDA driver's test double (CUBE_TEST_DRIVER=double), whose
         * launches take as long as the test says (CUBE_CUDA_DOUBLE_LAUNCH_US
         * in cubed's environment). */
        TEST_NEEDS_CUDA_DOUBLE = 1 << 3,
} test_need;
/* Whether the device under test has every need (test_need bits) of the case
 * named; prints the case's SKIP line when it has not. */
bool test_device_has(const char *name, unsigned needs);
/* Registers tf in tc unless the device under test lacks one of needs. */
#define tcase_add_test_needing(tc, tf, needs) do { \
        if (test_device_has(#tf, (needs))) \
                tcase_add_test(tc, tf); \
} while (0)
/* The instance name cubed takes on a socket of its own: the backend and the
 * device index ("cpu0", "cuda0"). */
const char *test_instance(void);

/* CUBE_TEST_TIMEOUT_MULT, at least 1: how many times slower this build may
 * be (a sanitizer's). */
int test_timeout_multiplier(void);
/* The daemon's resident memory (VmRSS), its open descriptors and its
 * mappings, from /proc; -1 when they cannot be read. */
long test_rss_kib(pid_t pid);
long test_vm_kib(pid_t pid);
/* Its resident shared memory (RssShmem): the device memory it touched. */
long test_shmem_kib(pid_t pid);
/* Whether the daemon runs under AddressSanitizer: its quarantine and shadow
 * memory make RSS and mapping counts say nothing, and it is several times
 * slower. */
bool test_under_asan(pid_t pid);
long test_open_fds(pid_t pid);
long test_mappings(pid_t pid);
/* How often pid's main thread has gone to sleep (voluntary_ctxt_switches). */
long test_sleeps(pid_t pid);
/* The children of parent running now with arg among their arguments (a
 * build is cube-device --build), or -1. */
long test_children_running(pid_t parent, const char *arg);
/* The first such child (the CPU device is cube-device --serve), or -1. */
pid_t test_child_running(pid_t parent, const char *arg);
/* How many files whose paths hold part process pid maps (at most 16), or -1. */
int test_maps_count(pid_t pid, const char *part);
/* The CPU time, in ms, process pid's first thread has taken (ret_main), and
 * its other threads together (ret_others): 0, or -1. */
int test_thread_cpu_ms(pid_t pid, long *ret_main, long *ret_others);
/* Process pid's nice value: 0, or -1 when it has ended. */
int test_nice_of(pid_t pid, long *ret_nice);

/* ---- peers of another uid --------------------------------------------------
 * A child becomes nobody and runs a step function; it talks to the test over
 * two pipes, one byte a message, so that the test can act while the child
 * holds its sessions. Its exit status is the step's verdict (0: as expected). */
#define NOBODY 65534
typedef int (*nobody_fn)(const char *socket, int from_test, int to_test);
typedef struct nobody {
        pid_t pid;
        int to_child, from_child;
} nobody;
/* Whether the test runs as root; says the checks are skipped otherwise. */
bool running_as_root(void);
/* Lets every user reach the daemon's socket. */
void open_socket_to_all(const test_daemon *d);
void nobody_start(nobody *n, const char *socket, nobody_fn fn);
void tell(int fd, char what);
/* The next byte from fd within timeout_ms, or -1 (EOF, timeout). */
int hear(int fd, int timeout_ms);
/* The child's exit status, or -1 when it did not end normally in time. */
int nobody_finish(nobody *n);

/* ---- two hosts: network namespaces joined by a veth pair -------------------
 * Namespaces cubetest-PID-0 and cubetest-PID-1, each with lo up and one end
 * of a veth pair, addressed addr[0] and addr[1] in one /30. Making them
 * needs root and ip(8). */
typedef struct test_netns {
        char name[2][32];
        char link[2][16];
        char addr[2][16];
        bool made[2];
} test_netns;
/* Makes the pair, first removing any a dead test process left behind.
 * Returns 0; or -1 with why filled, having removed what it made, when they
 * cannot be made here (not root, no ip, EPERM): the caller skips. */
int test_netns_create(test_netns *n, char *why, size_t len);
/* Removes both namespaces (the veth pair goes with them); n may be NULL. */
void test_netns_destroy(test_netns *n);
/* Moves the calling process into namespace i. Returns 0 or -1. */
int test_netns_enter(const test_netns *n, int i);
/* test_daemon_start, with the daemon run inside namespace i
 * (ip netns exec), after any $CUBE_TEST_WRAPPER. */
int test_daemon_start_in_netns(test_daemon *d, const test_netns *n, int i,
                               const char *const *extra_args);

/* Fills buf with bytes from a seeded generator that never yields long runs. */
void fill_random(void *buf, size_t n, uint64_t seed);

/* The value of one series ("name{labels}") in a metrics text, or -1. */
double test_metric_value(const char *text, const char *series);
/* The value of one series in the daemon's metrics, through c; aborts the test
 * on failure. */
double test_metric_of(cube_client *c, const char *series);

/* Current daemon status through a fresh client; aborts the test on failure. */
cube_status status_of(const char *socket);
/* Polls until memory in use is want, within timeout_ms. */
bool wait_memory_in_use(const char *socket, uint64_t want, int timeout_ms);

/* A client of the daemon at socket, named name; aborts the test on failure. */
cube_client *test_connect(const char *socket, const char *name);
/* An empty allocation of size bytes; aborts the test on failure. */
cube_handle test_empty(cube_client *c, uint64_t size);
/* Registers source's entry; aborts the test on failure. */
uint64_t test_kernel(cube_client *c, const char *source, const char *entry);
/* Sends l with info words built here: the u32 scalars given, then each bound
 * buffer's length in u32 elements. */
void test_launch_u32(cube_client *c, cube_launch l, const uint32_t *scalars, size_t n_scalars);
/* Asserts that e is of kind, naming what was expected, and frees it. */
void test_expect_kind(cube_error *e, cube_error_kind kind, const char *what);
/* Reads h, asserting that it holds n bytes and that they are want's, each
 * one written by the read. */
void test_expect_bytes(cube_client *c, const cube_handle *h, const void *want, size_t n);
/* How many failures the daemon's store still holds. */
size_t test_live_failures(cube_client *c);
/* Whether a line of the file at path (a daemon's log) holds needle. */
bool test_file_holds(const char *path, const char *needle);

/* affine(in -> out): out[i] = in[i] * 5 + 7, one const input and one
 * declared output; the kernel the failure-store suites pass failures along. */
extern const char test_affine_source[];
/* A kernel that never ends (each unit spins on a volatile), for the kernel
 * timeout. */
extern const char test_forever_source[];
extern const cube_buffer_io test_affine_io[2];
uint32_t test_affine(uint32_t x);
/* Runs the affine kernel registered as kernel over n fresh words and checks
 * what it wrote; returns the read's error instead when it failed (the
 * caller frees it). */
cube_error *test_affine_try(cube_client *c, uint64_t kernel, uint32_t n);

/* Asserts e is NULL, printing the message otherwise. */
#define ck_ok(expr) do { \
        cube_error *e_ = (expr); \
        ck_assert_msg(e_ == NULL, "%s: %s", #expr, e_ ? cube_error_message(e_) : ""); \
} while (0)

/* A kernel source a test or example carries as a string literal. */
typedef struct test_kernel_source {
        char *file;
        char *entry;                    /* the first KERNEL in it */
        char *source;
} test_kernel_source;

/* Every run of adjacent string literals in the C file at path that holds
 * "KERNEL void", decoded, appended to *ret (realloc'd; *ret_n counts them). */
int test_kernel_sources(const char *path, test_kernel_source **ret, size_t *ret_n);

#endif
