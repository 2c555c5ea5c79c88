/*
 * test-daemon.c - the foundation end to end: the real cubed, driven through
 * the real libcubeclient.
 *
 * Every test starts its own daemon and ends by stopping it with SIGTERM,
 * which must exit 0 and remove the socket file.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "errors.h"
#include "wire.h"

static void roundtrip(cube_client *c, size_t n, uint64_t seed)
{
        unsigned char *data = malloc(n ? n : 1), *back = malloc(n ? n : 1);
        cube_handle h;

        fill_random(data, n, seed);
        memset(back, 0xa5, n);
        ck_ok(cube_create(c, data, n, &h));
        ck_assert_uint_eq(cube_handle_len(&h), n);
        ck_ok(cube_read(c, &h, back, n));
        ck_assert_msg(memcmp(data, back, n) == 0, "%zu bytes came back different", n);
        ck_ok(cube_free(c, &h));
        free(data);
        free(back);
}

START_TEST(write_read_round_trips)
{
        cube_client *c;
        static const size_t sizes[] = { 0, 1, 4096, 64u << 20 };

        ck_ok(cube_connect(D.socket, "roundtrip", &c));
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
                roundtrip(c, sizes[i], i + 1);
        ck_ok(cube_sync(c, NULL, 0));
        cube_disconnect(c);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
}
END_TEST

START_TEST(partial_handles_read_and_write_their_range)
{
        cube_client *c;
        unsigned char data[1000], part[300], back[1000];
        cube_handle h, mid;

        fill_random(data, sizeof(data), 7);
        fill_random(part, sizeof(part), 8);
        ck_ok(cube_connect(D.socket, NULL, &c));
        ck_ok(cube_create(c, data, sizeof(data), &h));
        mid = cube_handle_slice(&h, 200, 500);
        ck_assert_uint_eq(cube_handle_len(&mid), 300);
        ck_ok(cube_write(c, &mid, part, sizeof(part)));
        ck_ok(cube_read(c, &h, back, sizeof(back)));
        memcpy(data + 200, part, sizeof(part));
        ck_assert(memcmp(back, data, sizeof(back)) == 0);
        ck_ok(cube_read(c, &mid, part, sizeof(part)));
        ck_assert(memcmp(part, data + 200, sizeof(part)) == 0);
        cube_disconnect(c);
}
END_TEST

START_TEST(a_memory_id_never_created_is_not_found)
{
        cube_client *c;
        cube_handle h, ghost;
        unsigned char b[16];
        cube_error *e;

        ck_ok(cube_connect(D.socket, NULL, &c));
        ck_ok(cube_empty(c, 16, &h));
        ghost = h;
        ghost.memory += 1000;
        e = cube_read(c, &ghost, b, sizeof(b));
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_IO);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_IO_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(cube_error_message(e), "never created"));
        ck_assert(!cube_error_is_refusal(e));
        ck_assert(!cube_error_is_device_poisoned(e));
        cube_error_free(e);

        /* The same for sync and check, and after a free. */
        e = cube_check(c, &ghost, 1);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_IO_NOT_FOUND);
        cube_error_free(e);
        e = cube_sync(c, &ghost, 1);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_IO_NOT_FOUND);
        cube_error_free(e);
        ck_ok(cube_free(c, &h));
        e = cube_read(c, &h, b, sizeof(b));
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_IO_NOT_FOUND);
        cube_error_free(e);
        cube_disconnect(c);
}
END_TEST

START_TEST(another_sessions_handle_is_not_found_never_aliased)
{
        cube_client *a, *b;
        cube_handle ha, hb;
        unsigned char da[64], db[64], back[64];
        cube_error *e;

        fill_random(da, sizeof(da), 21);
        fill_random(db, sizeof(db), 22);
        ck_ok(cube_connect(D.socket, "a", &a));
        ck_ok(cube_connect(D.socket, "b", &b));
        ck_ok(cube_create(a, da, sizeof(da), &ha));
        ck_ok(cube_create(b, db, sizeof(db), &hb));
        /* Both are their session's first allocation. */
        ck_assert_uint_eq(ha.memory & 0xffffffffffull, hb.memory & 0xffffffffffull);
        ck_assert_uint_ne(ha.memory, hb.memory);

        e = cube_read(b, &ha, back, sizeof(back));
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_IO);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_IO_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(cube_error_message(e), "belongs to session"));
        cube_error_free(e);
        e = cube_write(b, &ha, db, sizeof(db));
        ck_assert_ptr_null(e);          /* a notification: dropped by the daemon */
        ck_ok(cube_read(a, &ha, back, sizeof(back)));
        ck_assert(memcmp(back, da, sizeof(back)) == 0);
        ck_ok(cube_read(b, &hb, back, sizeof(back)));
        ck_assert(memcmp(back, db, sizeof(back)) == 0);
        cube_disconnect(a);
        cube_disconnect(b);
}
END_TEST

START_TEST(a_handle_from_another_daemon_is_foreign)
{
        test_daemon other;
        cube_client *a, *b;
        cube_handle h;
        unsigned char buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        cube_error *e;

        ck_assert_int_eq(test_daemon_start(&other, NULL), 0);
        ck_ok(cube_connect(D.socket, "a", &a));
        ck_ok(cube_connect(other.socket, "b", &b));
        ck_assert_str_ne(cube_client_service(a), cube_client_service(b));
        ck_ok(cube_create(a, buf, sizeof(buf), &h));

        e = cube_read(b, &h, buf, sizeof(buf));
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_FOREIGN_HANDLE);
        ck_assert_str_eq(cube_error_client_service(e), cube_client_service(b));
        cube_error_free(e);
        e = cube_write(b, &h, buf, sizeof(buf));
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_FOREIGN_HANDLE);
        cube_error_free(e);

        /* Asking for a kind of server the client does not reach. */
        const char *other_backend = strcmp(test_backend(), "cpu") == 0 ? "cuda" : "cpu";
        ck_ok(cube_client_require_backend(b, test_backend()));
        e = cube_client_require_backend(b, other_backend);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_SERVICE_MISMATCH);
        ck_assert_str_eq(cube_error_client_service(e), cube_client_service(b));
        ck_assert_str_eq(cube_error_requested_service(e), other_backend);
        cube_error_free(e);

        /* A raw peer that skips the library's own check meets the daemon's. */
        int fd = raw_connect(other.socket);
        ck_assert_int_ge(fd, 0);
        ck_assert(raw_hello(fd) != 0);
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_unpacked up;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_request(&pk, 9, "read", 2);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_array(&pk, 1);
        cube__pack_handle(&pk, &h);
        raw_send_sbuffer(fd, &sb);
        msgpack_sbuffer_destroy(&sb);
        ck_assert_int_eq(raw_recv(fd, &up, 5000), 1);
        cube__envelope env;
        const char *why;
        ck_assert_int_eq(cube__envelope_parse(&up.data, &env, &why), 0);
        ck_assert_int_eq(env.msgid, 9);
        ck_assert_int_eq(cube__err_unpack(env.error, CUBE__FAMILY_SERVER, &e), 0);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_FOREIGN_HANDLE);
        ck_assert_str_eq(cube_error_client_service(e), cube_client_service(b));
        cube_error_free(e);
        msgpack_unpacked_destroy(&up);
        close(fd);

        cube_disconnect(a);
        cube_disconnect(b);
        ck_assert_int_eq(test_daemon_stop(&other, 10000), 0);
}
END_TEST

START_TEST(a_failed_reservation_is_carried_by_the_memory)
{
        static const char *const args[] = { "--memory-limit", "1M", NULL };
        cube_client *c;
        cube_handle big, half, more;
        unsigned char b[4];
        cube_error *e;

        ck_assert_int_eq(test_daemon_stop(&D, 10000), 0);
        ck_assert_int_eq(test_daemon_start(&D, args), 0);
        ck_ok(cube_connect(D.socket, NULL, &c));

        /* Never fits: BufferTooBig, final. */
        ck_ok(cube_empty(c, 2u << 20, &big));
        e = cube_check(c, &big, 1);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_SEVERAL);
        ck_assert_uint_eq(cube_error_count(e), 1);
        const cube_error *u = cube_error_at(e, 0);
        ck_assert_int_eq(cube_error_kind_of(u), CUBE_SERVER_UNWRITTEN);
        ck_assert_uint_ge(cube_error_failure(u), 1);
        ck_assert_uint_eq(cube_error_claimed(u), 1);
        const cube_error *root = cube_error_source(u);
        ck_assert_int_eq(cube_error_kind_of(root), CUBE_SERVER_IO);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(root)), CUBE_IO_BUFFER_TOO_BIG);
        ck_assert_uint_eq(cube_error_size(cube_error_source(root)), 2u << 20);
        ck_assert(!cube_error_may_succeed_after_reclaim(root));
        cube_error_free(e);

        /* Fits alone, not beside another: OutOfMemory, worth a reclaim. */
        ck_ok(cube_empty(c, 600 * 1024, &half));
        ck_ok(cube_empty(c, 600 * 1024, &more));
        ck_ok(cube_check(c, &half, 1));
        e = cube_sync(c, &more, 1);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_SEVERAL);
        root = cube_error_source(cube_error_at(e, 0));
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(root)), CUBE_IO_OUT_OF_MEMORY);
        ck_assert(cube_error_may_succeed_after_reclaim(root));
        cube_error_free(e);

        /* A read of it reports the same failure; the healthy buffer reads. */
        unsigned char *buf = malloc(2u << 20);
        e = cube_read(c, &big, buf, 2u << 20);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_SEVERAL);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(cube_error_source(
                cube_error_at(e, 0)))), CUBE_IO_BUFFER_TOO_BIG);
        cube_error_free(e);
        e = cube_read(c, &more, buf, 600 * 1024);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_SEVERAL);
        cube_error_free(e);
        ck_ok(cube_read(c, &half, buf, 600 * 1024));
        free(buf);
        (void) b;

        /* Both failures at once: one Unwritten each. */
        cube_handle both[2] = { big, more };
        e = cube_check(c, both, 2);
        ck_assert_uint_eq(cube_error_count(e), 2);
        ck_assert_uint_ne(cube_error_failure(cube_error_at(e, 0)),
                          cube_error_failure(cube_error_at(e, 1)));
        cube_error_free(e);

        /* Freeing the failed buffers leaves no failure behind. */
        ck_ok(cube_free(c, &big));
        ck_ok(cube_free(c, &more));
        ck_ok(cube_free(c, &half));
        ck_ok(cube_sync(c, NULL, 0));
        cube_status st = status_of(D.socket);
        ck_assert_uint_eq(st.memory_in_use, 0);
        cube_disconnect(c);
}
END_TEST

START_TEST(sync_check_flush_and_cleanup_answer)
{
        cube_client *c;
        cube_handle h;
        unsigned char data[64];

        fill_random(data, sizeof(data), 3);
        ck_ok(cube_connect(D.socket, NULL, &c));
        ck_ok(cube_create(c, data, sizeof(data), &h));
        ck_ok(cube_sync(c, NULL, 0));
        ck_ok(cube_sync(c, &h, 1));
        ck_ok(cube_check(c, &h, 1));
        ck_ok(cube_flush(c));
        ck_ok(cube_memory_cleanup(c));
        cube_status st = status_of(D.socket);
        ck_assert_uint_eq(st.memory_in_use, sizeof(data));
        ck_assert_uint_eq(st.allocations, 1);
        ck_assert_uint_eq(st.sessions, 2);      /* c and the status client */
        cube_disconnect(c);
}
END_TEST

typedef struct worker_arg {
        cube_client *c;
        int index;
        int failures;
} worker_arg;

static void *worker(void *p)
{
        worker_arg *w = p;
        unsigned char data[3000], back[3000];

        for (int i = 0; i < 50; i++) {
                cube_handle h;
                size_t n = 1 + (size_t) ((w->index * 977 + i * 131) % (int) sizeof(data));
                fill_random(data, n, (uint64_t) (w->index * 1000 + i));
                cube_error *e = cube_create(w->c, data, n, &h);
                if (!e)
                        e = cube_read(w->c, &h, back, n);
                if (!e && memcmp(data, back, n) != 0)
                        w->failures++;
                if (!e)
                        e = cube_free(w->c, &h);
                if (e) {
                        w->failures++;
                        cube_error_free(e);
                }
        }
        return NULL;
}

/* Sends a write whose payload does not match its handle: the daemon records
 * the failure on the handle's bytes. */
static void raw_bad_write(int fd, const cube_handle *h)
{
        raw_send_write(fd, h, "abc", 3);
}

START_TEST(failures_on_disjoint_ranges_are_reported_apart_and_repaired_by_writes)
{
        int fd = raw_connect(D.socket);
        uint64_t nonce = 0, session = 0;
        raw_greet(fd, &nonce, &session);
        uint64_t mem = session << 40 | 1;
        cube_handle h = { .service = nonce, .memory = mem, .size = 1000 };
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_unpacked up;
        cube__envelope env;
        const char *why;
        cube_error *e;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_notify(&pk, "create", 3);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_uint64(&pk, mem);
        msgpack_pack_uint64(&pk, 1000);
        raw_send_sbuffer(fd, &sb);
        raw_bad_write(fd, &(cube_handle) { nonce, mem, 0, 0, 900, 1000 });   /* [0, 100) */
        raw_bad_write(fd, &(cube_handle) { nonce, mem, 0, 200, 700, 1000 }); /* [200, 300) */

        msgpack_sbuffer_clear(&sb);
        cube__pack_request(&pk, 4, "check", 2);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_array(&pk, 1);
        cube__pack_handle(&pk, &h);
        raw_send_sbuffer(fd, &sb);
        ck_assert_int_eq(raw_recv(fd, &up, 5000), 1);
        ck_assert_int_eq(cube__envelope_parse(&up.data, &env, &why), 0);
        ck_assert_int_eq(cube__err_unpack(env.error, CUBE__FAMILY_SERVER, &e), 0);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_SEVERAL);
        ck_assert_uint_eq(cube_error_count(e), 2);
        ck_assert_uint_ne(cube_error_failure(cube_error_at(e, 0)),
                          cube_error_failure(cube_error_at(e, 1)));
        ck_assert_ptr_nonnull(strstr(cube_error_message(e), "a write of 3 bytes"));
        cube_error_free(e);
        msgpack_unpacked_destroy(&up);

        /* A good write over [0, 150) repairs the first failure only. */
        char good[150] = {0};
        msgpack_sbuffer_clear(&sb);
        cube__pack_notify(&pk, "write", 3);
        msgpack_pack_uint64(&pk, 1);
        cube__pack_handle(&pk, &(cube_handle) { nonce, mem, 0, 0, 850, 1000 });
        msgpack_pack_bin(&pk, sizeof(good));
        msgpack_pack_bin_body(&pk, good, sizeof(good));
        cube__pack_request(&pk, 5, "check", 2);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_array(&pk, 1);
        cube__pack_handle(&pk, &h);
        raw_send_sbuffer(fd, &sb);
        msgpack_sbuffer_destroy(&sb);
        ck_assert_int_eq(raw_recv(fd, &up, 5000), 1);
        ck_assert_int_eq(cube__envelope_parse(&up.data, &env, &why), 0);
        ck_assert_int_eq(cube__err_unpack(env.error, CUBE__FAMILY_SERVER, &e), 0);
        ck_assert_uint_eq(cube_error_count(e), 1);
        cube_error_free(e);
        msgpack_unpacked_destroy(&up);
        close(fd);
}
END_TEST

START_TEST(fresh_memory_never_shows_another_sessions_bytes)
{
        static const size_t sizes[] = { 100, 4096, 1u << 20 };
        unsigned char *data = malloc(1u << 20), *zeros = calloc(1, 1u << 20);
        cube_client *a, *b;

        ck_ok(cube_connect(D.socket, "first", &a));
        for (size_t i = 0; i < 3; i++) {
                cube_handle h;
                memset(data, 0xee, sizes[i]);
                ck_ok(cube_create(a, data, sizes[i], &h));
                ck_ok(cube_free(a, &h));
        }
        ck_ok(cube_sync(a, NULL, 0));
        cube_disconnect(a);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));

        ck_ok(cube_connect(D.socket, "second", &b));
        for (size_t i = 0; i < 3; i++) {
                cube_handle h;
                ck_ok(cube_empty(b, sizes[i], &h));
                test_expect_bytes(b, &h, zeros, sizes[i]);
        }
        cube_disconnect(b);
        free(data);
        free(zeros);
}
END_TEST

START_TEST(threads_share_one_client_each_on_its_own_stream)
{
        cube_client *c;
        pthread_t t[6];
        worker_arg a[6];

        ck_ok(cube_connect(D.socket, "threads", &c));
        for (int i = 0; i < 6; i++) {
                a[i] = (worker_arg) { c, i, 0 };
                pthread_create(&t[i], NULL, worker, &a[i]);
        }
        for (int i = 0; i < 6; i++) {
                pthread_join(t[i], NULL);
                ck_assert_int_eq(a[i].failures, 0);
        }
        cube_disconnect(c);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
}
END_TEST

/* In a child: cubed on socket, on the backend under test, and nothing else. */
static void exec_cubed_on(const char *socket)
{
        const char *backend = test_backend();
        const char *device = getenv("CUBE_TEST_DEVICE") ? getenv("CUBE_TEST_DEVICE") : "0";

        execl(getenv("CUBED_BIN"), "cubed", "--socket", socket, "--backend", backend,
              "--device", device, (char *) NULL);
        _exit(127);
}

START_TEST(a_stale_socket_is_replaced_and_a_live_one_refused)
{
        test_daemon second;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char stale[128];
        int fd, status;

        /* A live daemon's path: a second daemon refuses it and exits 1. */
        pid_t pid = fork();
        if (pid == 0) {
                int devnull = open("/dev/null", 1);
                dup2(devnull, 2);
                exec_cubed_on(D.socket);
        }
        waitpid(pid, &status, 0);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1);
        cube_status st = status_of(D.socket);     /* the first still serves */
        ck_assert_uint_eq(st.sessions, 1);

        /* A stale socket file (nobody listening): replaced. */
        ck_assert_int_eq(test_daemon_start(&second, NULL), 0);
        ck_assert_int_eq(test_daemon_stop(&second, 10000), 0);
        snprintf(stale, sizeof(stale), "%s/stale", D.dir);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        strcpy(sa.sun_path, stale);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        close(fd);
        pid = fork();
        if (pid == 0) {
                int devnull = open("/dev/null", 1);
                dup2(devnull, 2);
                exec_cubed_on(stale);
        }
        for (int i = 0; i < 500; i++) {
                cube_client *c;
                cube_error *e = cube_connect(stale, NULL, &c);
                if (!e) {
                        cube_disconnect(c);
                        break;
                }
                cube_error_free(e);
                usleep(10000);
        }
        st = status_of(stale);
        ck_assert_uint_eq(st.sessions, 1);
        kill(pid, SIGTERM);
        waitpid(pid, &status, 0);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ck_assert_int_ne(access(stale, F_OK), 0);
}
END_TEST

START_TEST(a_client_killed_mid_write_leaves_no_memory)
{
        int ready[2];
        pid_t pid;
        char byte;

        ck_assert_int_eq(pipe(ready), 0);
        pid = fork();
        if (pid == 0) {
                /* A raw client: hello, create 64 MiB, then half a 64 MiB write. */
                const size_t n = 64u << 20;
                int fd = raw_connect(D.socket);
                uint64_t nonce = 0, session = 0;
                raw_greet(fd, &nonce, &session);
                msgpack_sbuffer sb;
                msgpack_packer pk;
                cube_handle h = { .service = nonce, .memory = session << 40 | 1, .size = n };
                char *junk = calloc(1, n / 2);

                msgpack_sbuffer_init(&sb);
                msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
                cube__pack_notify(&pk, "create", 3);
                msgpack_pack_uint64(&pk, 1);
                msgpack_pack_uint64(&pk, h.memory);
                msgpack_pack_uint64(&pk, n);
                cube__pack_notify(&pk, "write", 3);
                msgpack_pack_uint64(&pk, 1);
                cube__pack_handle(&pk, &h);
                msgpack_pack_bin(&pk, n);
                raw_send_sbuffer(fd, &sb);
                raw_send(fd, junk, n / 2);
                (void) !write(ready[1], "x", 1);
                pause();
                _exit(0);
        }
        ck_assert_int_eq(read(ready[0], &byte, 1), 1);
        ck_assert(wait_memory_in_use(D.socket, 64u << 20, 5000));
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        ck_assert_msg(wait_memory_in_use(D.socket, 0, 5000),
                      "the killed client's 64 MiB were not reclaimed");
        cube_status st = status_of(D.socket);
        ck_assert_uint_eq(st.sessions, 1);
        ck_assert_uint_eq(st.allocations, 0);
        close(ready[0]);
        close(ready[1]);
}
END_TEST

START_TEST(the_default_socket_comes_from_the_environment)
{
        cube_client *c;
        cube_error *e;

        setenv("CUBE_SOCKET", D.socket, 1);
        ck_ok(cube_connect(NULL, NULL, &c));
        cube_disconnect(c);
        setenv("CUBE_SOCKET", "/nonexistent/cube.sock", 1);
        e = cube_connect(NULL, NULL, &c);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_GENERIC);
        ck_assert_ptr_nonnull(strstr(cube_error_message(e), "/nonexistent/cube.sock"));
        ck_assert_ptr_nonnull(strstr(cube_error_message(e), "$CUBE_SOCKET"));
        cube_error_free(e);
        unsetenv("CUBE_SOCKET");
}
END_TEST

/* Runs cubectl; returns its exit status and its stdout in out. */
static int run_cubectl(const char *const *args, char *out, size_t cap)
{
        int p[2], status;
        const char *argv[16] = { getenv("CUBECTL_BIN") };
        int n = 1;
        size_t len = 0;

        for (const char *const *a = args; *a; a++)
                argv[n++] = *a;
        argv[n] = NULL;
        ck_assert_int_eq(pipe(p), 0);
        pid_t pid = fork();
        if (pid == 0) {
                dup2(p[1], 1);
                dup2(p[1], 2);
                execv(argv[0], (char **) argv);
                _exit(127);
        }
        close(p[1]);
        for (ssize_t r; (r = read(p[0], out + len, cap - 1 - len)) > 0;)
                len += (size_t) r;
        out[len] = '\0';
        close(p[0]);
        waitpid(pid, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

START_TEST(cubectl_status_reports_the_daemon)
{
        char out[4096];
        cube_client *c;
        cube_handle h;
        unsigned char data[5000];

        ck_ok(cube_connect(D.socket, NULL, &c));
        ck_ok(cube_create(c, data, sizeof(data), &h));
        ck_ok(cube_sync(c, NULL, 0));
        const char *human[] = { "--socket", D.socket, "status", NULL };
        ck_assert_int_eq(run_cubectl(human, out, sizeof(out)), 0);
        ck_assert_ptr_nonnull(strstr(out, cube_client_service(c)));
        char backend_line[64];
        snprintf(backend_line, sizeof(backend_line), "backend:     %s", test_backend());
        ck_assert_ptr_nonnull(strstr(out, backend_line));
        ck_assert_ptr_nonnull(strstr(out, "4.9 KiB in use in 1 allocations"));

        const char *json[] = { "--socket", D.socket, "--json", "status", NULL };
        ck_assert_int_eq(run_cubectl(json, out, sizeof(out)), 0);
        ck_assert_ptr_nonnull(strstr(out, "\"memory_in_use\":5000"));
        ck_assert_ptr_nonnull(strstr(out, "\"sessions\":2"));
        snprintf(backend_line, sizeof(backend_line), "\"backend\":\"%s\"", test_backend());
        ck_assert_ptr_nonnull(strstr(out, backend_line));

        const char *missing[] = { "--socket", "/nonexistent/x.sock", "status", NULL };
        ck_assert_int_eq(run_cubectl(missing, out, sizeof(out)), 3);
        ck_assert_ptr_nonnull(strstr(out, "/nonexistent/x.sock"));
        const char *bad[] = { "--socket", D.socket, "frobnicate", NULL };
        ck_assert_int_eq(run_cubectl(bad, out, sizeof(out)), 2);
        cube_disconnect(c);
}
END_TEST

START_TEST(sigterm_under_valgrind_exits_clean_without_leaks)
{
        static const char *const wrapper[] = {
                "valgrind", "-q", "--error-exitcode=99", "--leak-check=full",
                "--errors-for-leak-kinds=definite,indirect", "--show-leak-kinds=definite,indirect",
                "--track-fds=no", NULL
        };
        test_daemon v;
        cube_client *c;

        ck_assert_int_eq(test_daemon_start_wrapped(&v, wrapper, NULL), 0);
        ck_ok(cube_connect(v.socket, NULL, &c));
        roundtrip(c, 100000, 11);
        roundtrip(c, 0, 12);
        cube_handle h;
        ck_ok(cube_empty(c, 4096, &h));         /* left for the session's end to reclaim */
        cube_disconnect(c);
        ck_ok(cube_connect(v.socket, NULL, &c));
        ck_ok(cube_empty(c, 4096, &h));         /* left for the shutdown to reclaim */
        ck_ok(cube_sync(c, NULL, 0));
        ck_assert_int_eq(test_daemon_stop(&v, 60000), 0);
        cube_disconnect(c);
}
END_TEST

/* hello says what the reference's ServerUtilities says: a checksum of the
 * properties, equal for equal properties across daemons and runs and
 * different when they differ; the target compiled code depends on; and the
 * transport between devices with the element types it reduces, or none. */
START_TEST(hello_carries_the_properties_hash_target_and_device_transport)
{
        const char *same[] = { "--memory-limit", "64M", NULL };
        const char *other[] = { "--memory-limit", "32M", "--transport", "none", NULL };
        test_daemon d1, d2, d3;
        cube_client *a, *b, *c;
        uint64_t h;

        ck_assert_int_eq(test_daemon_start(&d1, same), 0);
        ck_assert_int_eq(test_daemon_start(&d2, same), 0);
        ck_assert_int_eq(test_daemon_start(&d3, other), 0);
        a = test_connect(d1.socket, "a");
        b = test_connect(d2.socket, "b");
        c = test_connect(d3.socket, "c");
        h = cube_client_properties_hash(a);
        ck_assert_uint_ne(h, 0);
        ck_assert_uint_eq(cube_client_properties_hash(b), h);
        ck_assert_uint_ne(cube_client_properties_hash(c), h);
        ck_assert_uint_gt(strlen(cube_client_target(a)), 0);
        ck_assert_str_eq(cube_client_target(a), cube_client_target(b));

        /* The CPU device has Gloo; another backend may have no transport. */
        if (strcmp(test_backend(), "cpu") == 0) {
                ck_assert_ptr_nonnull(cube_client_device_transport(a));
                ck_assert(cube_client_transport_reduces(a, CUBE_ELEM_F32));
                ck_assert(cube_client_transport_reduces(a, CUBE_ELEM_I64));
        }
        ck_assert_ptr_null(cube_client_device_transport(c));
        ck_assert(!cube_client_transport_reduces(c, CUBE_ELEM_F32));
        cube_disconnect(a);
        cube_disconnect(b);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d1, 10000), 0);
        ck_assert_int_eq(test_daemon_stop(&d2, 10000), 0);
        ck_assert_int_eq(test_daemon_stop(&d3, 10000), 0);
}
END_TEST

/* The harness: a test process that ends without stopping its daemon, and a
 * daemon its test killed itself, leave nothing behind (each run of the
 * suites would otherwise leave directories in /tmp for good). */
START_TEST(a_test_process_leaves_no_daemon_and_no_directory_behind)
{
        test_daemon left, killed;
        int fds[2], status;
        pid_t child;

        if (getenv("CUBE_TEST_LEAVE"))
                return;
        ck_assert_int_eq(pipe(fds), 0);
        ck_assert_int_ge(child = fork(), 0);
        if (child == 0) {
                close(fds[0]);
                bool told = test_daemon_start(&left, NULL) == 0 &&
                            write(fds[1], &left, sizeof(left)) == (ssize_t) sizeof(left);
                exit(told ? 0 : 1);     /* not stopped: the harness cleans up */
        }
        close(fds[1]);
        ck_assert_int_eq(read(fds[0], &left, sizeof(left)), (ssize_t) sizeof(left));
        close(fds[0]);
        ck_assert_int_eq(waitpid(child, &status, 0), child);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ck_assert_msg(access(left.dir, F_OK) < 0, "%s is left behind", left.dir);
        ck_assert_msg(kill(left.pid, 0) < 0 && errno == ESRCH, "cubed (pid %d) is left running",
                      (int) left.pid);

        ck_assert_int_eq(test_daemon_start(&killed, NULL), 0);
        kill(killed.pid, SIGKILL);
        waitpid(killed.pid, NULL, 0);
        killed.pid = 0;
        ck_assert_int_eq(test_daemon_stop(&killed, 1000), -1);
        ck_assert_msg(access(killed.dir, F_OK) < 0, "%s is left behind", killed.dir);
}
END_TEST

static Suite *daemon_suite(void)
{
        Suite *s = suite_create("daemon");
        TCase *tc = tcase_create("foundation");

        tcase_add_checked_fixture(tc, test_start_default, test_stop_clean);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, write_read_round_trips);
        tcase_add_test(tc, partial_handles_read_and_write_their_range);
        tcase_add_test(tc, a_memory_id_never_created_is_not_found);
        tcase_add_test(tc, another_sessions_handle_is_not_found_never_aliased);
        tcase_add_test(tc, a_handle_from_another_daemon_is_foreign);
        tcase_add_test(tc, a_failed_reservation_is_carried_by_the_memory);
        tcase_add_test(tc, sync_check_flush_and_cleanup_answer);
        tcase_add_test(tc, failures_on_disjoint_ranges_are_reported_apart_and_repaired_by_writes);
        tcase_add_test(tc, fresh_memory_never_shows_another_sessions_bytes);
        tcase_add_test(tc, threads_share_one_client_each_on_its_own_stream);
        tcase_add_test(tc, a_stale_socket_is_replaced_and_a_live_one_refused);
        tcase_add_test(tc, a_client_killed_mid_write_leaves_no_memory);
        tcase_add_test(tc, the_default_socket_comes_from_the_environment);
        tcase_add_test(tc, cubectl_status_reports_the_daemon);
        tcase_add_test(tc, hello_carries_the_properties_hash_target_and_device_transport);
        tcase_add_test(tc, a_test_process_leaves_no_daemon_and_no_directory_behind);
        /* An ASan-built daemon cannot run under valgrind; the sanitizer run
         * checks leaks through LeakSanitizer instead, and skips this. */
        tcase_add_test_needing(tc, sigterm_under_valgrind_exits_clean_without_leaks,
                               TEST_NEEDS_VALGRIND);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(daemon_suite());
        int failed;

        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}
