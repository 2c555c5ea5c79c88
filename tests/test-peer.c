/*
 * test-peer.c - peer access between two CPU daemons of one host: who may
 * access whom, a kernel on one device writing and reading a buffer of the
 * other, the owner learning from the peer itself what its kernels wrote
 * (written, failed with the peer's own error, poisoned), peer_address on a
 * tainted buffer, the bound-range limit, a peer of another user (a daemon, a
 * session asking for the memory, a process posing as a peer), who may bind,
 * and a peer that dies under a device that binds its memory.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define N 1024

static cube_launch affine_over(uint64_t k, const cube_handle *bufs)
{
        return (cube_launch) {
                .kernel = k, .cube_count = { N / 64, 1, 1 }, .cube_dim = { 64, 1, 1 },
                .buffers = bufs, .io = test_affine_io, .n_buffers = 2,
        };
}

/* The address of h on its daemon, bound as a handle on the other's. */
static cube_handle bind_peer(cube_client *owner, const cube_handle *h, cube_client *user,
                             const char *owner_name)
{
        cube_handle bound;
        uint64_t address;

        ck_ok(cube_peer_address(owner, h, &address));
        ck_ok(cube_peer_bind(user, owner_name, address, h->size, &bound));
        return bound;
}

/* Daemons cpu0 and cpu1 started with args, a client of each, and cpu1's
 * memory handed to cpu0. */
static void peers_up(test_group *g, const char *const *args, cube_client **ret_a,
                     cube_client **ret_b)
{
        bool can = false;

        ck_assert_int_eq(test_group_start(g, 2, args), 0);
        *ret_a = test_connect(g->d[0].socket, "a");
        *ret_b = test_connect(g->d[1].socket, "b");
        ck_ok(cube_can_access_peer(*ret_a, "cpu1", &can));
        ck_assert(can);
}

START_TEST(test_who_may_access)
{
        test_group g;
        cube_client *a, *b;
        bool can = false;

        ck_assert_int_eq(test_group_start(&g, 2, NULL), 0);
        a = test_connect(g.d[0].socket, "a");
        b = test_connect(g.d[1].socket, "b");
        ck_ok(cube_can_access_peer(a, "cpu1", &can));
        ck_assert_msg(can, "two CPU daemons of one user map each other's memory");
        can = false;
        ck_ok(cube_can_access_peer(a, "cpu1", &can));   /* mapped already */
        ck_assert(can);
        can = false;
        ck_ok(cube_can_access_peer(b, "cpu0", &can));
        ck_assert(can);
        ck_ok(cube_can_access_peer(a, "cpu0", &can));   /* itself */
        ck_assert(!can);
        can = true;
        ck_ok(cube_can_access_peer(a, "cpu7", &can));   /* nobody there */
        ck_assert(!can);
        can = true;
        ck_ok(cube_can_access_peer(a, "../cpu1", &can));
        ck_assert(!can);
        cube_disconnect(a);
        cube_disconnect(b);
        test_group_stop_clean(&g);
}
END_TEST

/* The read of h on c fails within a few seconds, on an error it returns:
 * what a peer whose device is poisoned tells comes in behind its sync's
 * answer, which a poisoned device gives at once. */
static cube_error *read_fails(cube_client *c, const cube_handle *h)
{
        uint32_t *got = malloc(cube_handle_len(h));
        long until = test_now_ms() + test_scaled_ms(5000);
        cube_error *e;

        while (!(e = cube_read(c, h, got, cube_handle_len(h))) && test_now_ms() < until)
                usleep(20000);
        free(got);
        return e;
}

/* Whether kind is on the way from e to its root. */
static bool carries(const cube_error *e, cube_error_kind kind)
{
        while (e && cube_error_kind_of(e) != kind)
                e = cube_error_count(e) == 1 ? cube_error_at(e, 0) : cube_error_source(e);
        return e != NULL;
}

/* The innermost error of e is of kind. */
static void ck_root_is(const cube_error *e, cube_error_kind kind, const char *words)
{
        ck_assert_msg(e != NULL, "the read succeeded");
        ck_assert_msg(cube_error_kind_of(cube_error_root(e)) == kind && strstr(
                      cube_error_message(e), words), "not kind %d with '%s': %s", (int) kind,
                      words, cube_error_message(e));
}

START_TEST(test_kernel_writes_peer_buffer)
{
        test_group g;
        cube_client *a, *b;
        uint32_t in[N], zeros[N] = {0}, got[N];
        cube_handle src, dst, bound, other;

        peers_up(&g, NULL, &a, &b);
        for (uint32_t i = 0; i < N; i++)
                in[i] = i * 3 + 1;
        ck_ok(cube_create(a, in, sizeof(in), &src));
        ck_ok(cube_create(b, zeros, sizeof(zeros), &dst));
        ck_ok(cube_create(b, zeros, sizeof(zeros), &other));
        ck_ok(cube_sync(b, &dst, 1));
        bound = bind_peer(b, &dst, a, "cpu1");
        /* An earlier launch on B failed writing it: the buffer carries that
         * until a kernel's write is done. */
        test_launch_u32(b, affine_over(999, (cube_handle[]) { other, dst }), NULL, 0);
        cube_error *e = cube_read(b, &dst, got, sizeof(got));
        ck_assert_msg(e && strstr(cube_error_message(e), "never registered"), "%s",
                      e ? cube_error_message(e) : "read");
        cube_error_free(e);
        /* A kernel on A writes it: once A's sync answers, B reads what it
         * wrote, told by A itself. */
        uint64_t k = test_kernel(a, test_affine_source, "affine");
        test_launch_u32(a, affine_over(k, (cube_handle[]) { src, bound }), NULL, 0);
        ck_ok(cube_sync(a, &bound, 1));
        ck_ok(cube_check(a, &bound, 1));
        ck_ok(cube_read(b, &dst, got, sizeof(got)));
        for (uint32_t i = 0; i < N; i++)
                ck_assert_uint_eq(got[i], test_affine(in[i]));
        /* And through the bound handle on A, the same bytes. */
        memset(got, 0, sizeof(got));
        ck_ok(cube_read(a, &bound, got, sizeof(got)));
        ck_assert_uint_eq(got[N - 1], test_affine(in[N - 1]));
        cube_disconnect(a);
        cube_disconnect(b);
        test_group_stop_clean(&g);
}
END_TEST

/* A buffer of B (zeros) bound on A, a source of zeros on A, the affine
 * kernel on A, and its launch from the one to the other, which fails on
 * A's device with kind (reason). */
typedef struct peer_write {
        cube_handle src, dst, bound;
        uint64_t kernel;
} peer_write;

static peer_write failing_peer_write(cube_client *a, cube_client *b, cube_error_kind kind,
                                     const char *reason)
{
        uint32_t zeros[N] = {0};
        peer_write w;

        ck_ok(cube_create(a, zeros, sizeof(zeros), &w.src));
        ck_ok(cube_create(b, zeros, sizeof(zeros), &w.dst));
        w.bound = bind_peer(b, &w.dst, a, "cpu1");
        w.kernel = test_kernel(a, test_affine_source, "affine");
        ck_ok(cube_debug_inject(a, CUBE_FAULT_DEVICE_LAUNCH, kind, reason, 0));
        test_launch_u32(a, affine_over(w.kernel, (cube_handle[]) { w.src, w.bound }), NULL, 0);
        return w;
}

/* A kernel on A that writes B's buffer and fails: B's reads answer A's own
 * error value, with no word from any client; the next kernel that writes it
 * repairs it. */
START_TEST(test_peer_failure_reaches_the_owner)
{
        static const char *const args[] = { "--enable-fault-injection", NULL };
        test_group g;
        cube_client *a, *b;
        uint32_t got[N];
        cube_error *e;

        peers_up(&g, args, &a, &b);
        peer_write w = failing_peer_write(a, b, CUBE_LAUNCH_UNKNOWN, "the peer's kernel failed");
        e = cube_sync(a, &w.bound, 1);
        ck_root_is(e, CUBE_LAUNCH_UNKNOWN, "the peer's kernel failed");
        cube_error_free(e);
        e = cube_read(b, &w.dst, got, sizeof(got));
        ck_root_is(e, CUBE_LAUNCH_UNKNOWN, "the peer's kernel failed");
        ck_assert_msg(carries(e, CUBE_SERVER_UNWRITTEN) && carries(e, CUBE_SERVER_LAUNCH),
                      "%s", cube_error_message(e));
        ck_assert(!cube_error_is_refusal(e));
        cube_error_free(e);
        /* Nor may B hand the address to anyone. */
        uint64_t address;
        e = cube_peer_address(b, &w.dst, &address);
        ck_root_is(e, CUBE_LAUNCH_UNKNOWN, "the peer's kernel failed");
        cube_error_free(e);
        /* A launch on A refused outright taints it with the refusal. */
        test_launch_u32(a, affine_over(999, (cube_handle[]) { w.src, w.bound }), NULL, 0);
        ck_ok(cube_sync(a, NULL, 0));
        e = cube_read(b, &w.dst, got, sizeof(got));
        ck_root_is(e, CUBE_SERVER_VALIDATION, "never registered");
        cube_error_free(e);
        /* A kernel that writes it repairs it, on B too. */
        test_launch_u32(a, affine_over(w.kernel, (cube_handle[]) { w.src, w.bound }), NULL, 0);
        ck_ok(cube_sync(a, &w.bound, 1));
        ck_ok(cube_read(b, &w.dst, got, sizeof(got)));
        ck_assert_uint_eq(got[N - 1], test_affine(0));
        cube_disconnect(a);
        cube_disconnect(b);
        test_group_stop_clean(&g);
}
END_TEST

/* A kernel on A that faults, poisoning A, while writing B's buffer (the
 * fault as the backend hands it back): B's reads answer the poison, not a
 * refusal. B itself serves on. */
START_TEST(test_poisoned_peer)
{
        static const char *const args[] = { "--enable-fault-injection", NULL };
        test_group g;
        cube_client *a, *b;
        uint32_t zeros[N] = {0}, got[N];
        cube_handle mine;
        cube_error *e;

        peers_up(&g, args, &a, &b);
        peer_write w = failing_peer_write(a, b, CUBE_DEVICE_POISON, "the peer's kernel faulted");
        e = cube_sync(a, NULL, 0);
        ck_assert_msg(e && cube_error_is_device_poisoned(e), "%s",
                      e ? cube_error_message(e) : "A's sync succeeded");
        cube_error_free(e);
        e = read_fails(b, &w.dst);
        ck_root_is(e, CUBE_DEVICE_POISON, "the peer's kernel faulted");
        ck_assert_msg(carries(e, CUBE_SERVER_UNWRITTEN) && carries(e, CUBE_SERVER_LAUNCH) &&
                      carries(e, CUBE_LAUNCH_DEVICE_POISONED), "%s", cube_error_message(e));
        ck_assert(!cube_error_is_refusal(e));
        cube_error_free(e);
        /* B's device is not A's: it serves on. */
        ck_ok(cube_create(b, zeros, sizeof(zeros), &mine));
        ck_ok(cube_read(b, &mine, got, sizeof(got)));
        cube_disconnect(a);
        cube_disconnect(b);
        test_group_stop(&g);
}
END_TEST

START_TEST(test_kernel_reads_peer_buffer)
{
        test_group g;
        cube_client *a, *b;
        uint32_t in[N], got[N];
        cube_handle src, dst, bound;

        peers_up(&g, NULL, &a, &b);
        for (uint32_t i = 0; i < N; i++)
                in[i] = i ^ 0x5a5a;
        ck_ok(cube_create(b, in, sizeof(in), &src));
        ck_ok(cube_sync(b, &src, 1));
        bound = bind_peer(b, &src, a, "cpu1");
        ck_ok(cube_empty(a, sizeof(got), &dst));
        uint64_t k = test_kernel(a, test_affine_source, "affine");
        test_launch_u32(a, affine_over(k, (cube_handle[]) { bound, dst }), NULL, 0);
        ck_ok(cube_read(a, &dst, got, sizeof(got)));
        for (uint32_t i = 0; i < N; i++)
                ck_assert_uint_eq(got[i], test_affine(in[i]));
        /* An address of another device, or beyond the peer's memory, binds
         * nothing. */
        cube_handle h;
        cube_error *e = cube_peer_bind(a, "cpu1", 12345, 64, &h);
        ck_assert_msg(e && strstr(cube_error_message(e), "is not one of device cpu1"), "%s",
                      e ? cube_error_message(e) : "bound");
        cube_error_free(e);
        /* A session holds at most 4096 bound ranges (one is bound above). */
        uint64_t address;
        ck_ok(cube_peer_address(b, &src, &address));
        for (int i = 1; i < 4096; i++)
                ck_ok(cube_peer_bind(a, "cpu1", address, 64, &h));
        e = cube_peer_bind(a, "cpu1", address, 64, &h);
        ck_assert_msg(e && strstr(cube_error_message(e), "at most 4096 bound peer ranges"), "%s",
                      e ? cube_error_message(e) : "bound");
        cube_error_free(e);
        ck_ok(cube_free(a, &bound));
        ck_ok(cube_peer_bind(a, "cpu1", address, 64, &h));
        cube_disconnect(a);
        cube_disconnect(b);
        test_group_stop_clean(&g);
}
END_TEST

START_TEST(test_address_of_tainted_buffer)
{
        test_group g;
        cube_client *a, *b;
        uint32_t data[N] = {0};
        cube_handle h;
        uint64_t address = 0;
        cube_error *e;

        peers_up(&g, NULL, &a, &b);
        ck_ok(cube_create(b, data, sizeof(data), &h));
        ck_ok(cube_peer_address(b, &h, &address));
        ck_assert_uint_ne(address >> 48, 0);    /* tagged with the device */
        /* A kernel elsewhere failed writing it: the address is refused with
         * the cause, so no peer binds bytes nothing wrote. */
        cube_handle bound = bind_peer(b, &h, a, "cpu1"), in;
        ck_ok(cube_create(a, data, sizeof(data), &in));
        test_launch_u32(a, affine_over(999, (cube_handle[]) { in, bound }), NULL, 0);
        ck_ok(cube_sync(a, NULL, 0));
        e = cube_peer_address(b, &h, &address);
        ck_assert_msg(e && strstr(cube_error_message(e), "never registered"), "%s",
                      e ? cube_error_message(e) : "an address");
        cube_error_free(e);
        /* A write repairs it. */
        ck_ok(cube_write(b, &h, data, sizeof(data)));
        ck_ok(cube_peer_address(b, &h, &address));
        /* A launch on B that failed taints what it writes: its address is
         * refused with the launch's failure. */
        cube_handle out;
        ck_ok(cube_create(b, data, sizeof(data), &out));
        test_launch_u32(b, affine_over(999, (cube_handle[]) { h, out }), NULL, 0);
        e = cube_peer_address(b, &out, &address);
        ck_assert_msg(e && strstr(cube_error_message(e), "never registered"), "%s",
                      e ? cube_error_message(e) : "an address");
        cube_error_free(e);
        ck_ok(cube_peer_address(b, &h, &address));      /* its input is untouched */
        cube_disconnect(a);
        cube_disconnect(b);
        test_group_stop_clean(&g);
}
END_TEST

START_TEST(test_peer_of_another_user)
{
        test_group g;
        test_daemon other;
        cube_client *a;
        char link[160];
        bool can = true;

        if (!running_as_root())
                return;
        if (system("command -v setpriv >/dev/null") != 0) {
                fprintf(stderr, "no setpriv: skipped\n");
                return;
        }
        /* It is device cpu1 (its socket's name), in a directory of its own
         * that the group's comm directory links to. */
        char dir[] = "/tmp/cube-nobody-XXXXXX", sock[96];
        ck_assert_ptr_nonnull(mkdtemp(dir));
        ck_assert_int_eq(chown(dir, NOBODY, NOBODY), 0);
        snprintf(sock, sizeof(sock), "%s/cpu1.sock", dir);
        const char *const args[] = { "--socket", sock, NULL };
        ck_assert_int_eq(test_group_start(&g, 1, NULL), 0);
        ck_assert_int_eq(test_daemon_start_as(&other, NOBODY, args), 0);
        snprintf(link, sizeof(link), "%s/cpu1.sock", g.dir);
        ck_assert_int_eq(symlink(sock, link), 0);
        a = test_connect(g.d[0].socket, "a");
        ck_ok(cube_can_access_peer(a, "cpu1", &can));
        ck_assert_msg(!can, "a daemon of another user never maps this one's memory");
        cube_disconnect(a);
        unlink(link);
        ck_assert_int_eq(test_daemon_stop(&other, 10000), 0);
        unlink(sock);
        rmdir(dir);
        test_group_stop_clean(&g);
}
END_TEST

/* A session of another user asks for the device's memory itself. */
static int ask_memory_as_nobody(const char *socket, int from_test, int to_test)
{
        msgpack_unpacked up;
        char text[2048] = "";
        int fd = raw_connect(socket), passed;
        bool refused;

        (void) from_test;
        (void) to_test;
        if (fd < 0 || !raw_hello(fd))
                return 2;
        raw_send_request_u64(fd, 2, "peer_memory", NULL, 0);
        if (raw_recv(fd, &up, 5000) != 1)
                return 3;
        refused = up.data.type == MSGPACK_OBJECT_ARRAY && up.data.via.array.size == 4 &&
                  up.data.via.array.ptr[2].type != MSGPACK_OBJECT_NIL;
        msgpack_object_print_buffer(text, sizeof(text), up.data);
        msgpack_unpacked_destroy(&up);
        passed = raw_take_fd(fd);
        close(fd);
        if (passed >= 0) {
                close(passed);
                return 4;
        }
        return refused && strstr(text, "between daemons of one user") ? 0 : 1;
}

/* A daemon hands its memory only to a session of its own user. */
START_TEST(test_memory_for_the_daemons_user_only)
{
        test_group g;
        nobody n;

        if (!running_as_root())
                return;
        ck_assert_int_eq(test_group_start(&g, 1, NULL), 0);
        ck_assert_int_eq(chmod(g.dir, 0755), 0);
        ck_assert_int_eq(chmod(g.d[0].socket, 0666), 0);
        nobody_start(&n, g.d[0].socket, ask_memory_as_nobody);
        ck_assert_int_eq(nobody_finish(&n), 0);
        test_group_stop_clean(&g);
}
END_TEST

static uint64_t granted_address;

static int bind_as_nobody(const char *socket, int from_test, int to_test)
{
        cube_client *c;
        cube_handle h;
        cube_error *e;
        int ok;

        (void) from_test;
        (void) to_test;
        if ((e = cube_connect(socket, "nobody", &c))) {
                cube_error_free(e);
                return 2;
        }
        e = cube_peer_bind(c, "cpu1", granted_address, 64, &h);
        ok = e && cube_error_kind_of(e) == CUBE_SERVER_VALIDATION &&
             strstr(cube_error_message(e), "for this daemon's user");
        cube_error_free(e);
        cube_disconnect(c);
        return ok ? 0 : 1;
}

/* A bound range reaches whatever the peer holds there, so only the daemon's
 * own user (and root) may bind one. */
START_TEST(test_bind_is_for_the_daemons_user)
{
        test_group g;
        cube_client *a, *b;
        uint32_t data[16] = {0};
        cube_handle h;
        nobody n;

        if (!running_as_root())
                return;
        peers_up(&g, NULL, &a, &b);
        ck_ok(cube_create(b, data, sizeof(data), &h));
        ck_ok(cube_peer_address(b, &h, &granted_address));
        ck_assert_int_eq(chmod(g.dir, 0755), 0);
        ck_assert_int_eq(chmod(g.d[0].socket, 0666), 0);
        nobody_start(&n, g.d[0].socket, bind_as_nobody);
        ck_assert_int_eq(nobody_finish(&n), 0);
        cube_disconnect(a);
        cube_disconnect(b);
        test_group_stop_clean(&g);
}
END_TEST

/* A socket listening at path, or -1. */
static int socket_fd_listening(const char *path, struct sockaddr_un *sa)
{
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        snprintf(sa->sun_path, sizeof(sa->sun_path), "%s", path);
        if (fd < 0 || bind(fd, (struct sockaddr *) sa, sizeof(*sa)) < 0 || listen(fd, 4) < 0) {
                if (fd >= 0)
                        close(fd);
                return -1;
        }
        return fd;
}

/* A process of another user posing as device cpu1: it answers hello and
 * peer_memory, handing over a memfd of its own, to whoever connects. */
static int pose_as_peer(const char *socket, int from_test, int to_test)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int l = socket_fd_listening(socket, &sa), c, mem;

        if (l < 0)
                return 2;
        tell(to_test, 'r');
        c = accept(l, NULL, NULL);
        mem = memfd_create("posing", 0);
        if (c < 0 || mem < 0 || ftruncate(mem, 1 << 20) < 0)
                return 3;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 4);
        msgpack_pack_uint8(&pk, 1);
        msgpack_pack_uint8(&pk, 1);
        msgpack_pack_nil(&pk);
        msgpack_pack_map(&pk, 0);
        msgpack_pack_array(&pk, 4);
        msgpack_pack_uint8(&pk, 1);
        msgpack_pack_uint8(&pk, 2);
        msgpack_pack_nil(&pk);
        msgpack_pack_array(&pk, 3);
        msgpack_pack_uint64(&pk, 1 << 20);
        msgpack_pack_uint64(&pk, 7);
        msgpack_pack_str_with_body(&pk, "cpu1", 4);
        (void) raw_send_fd(c, sb.data, sb.size, mem);   /* refused: it may be closed */
        msgpack_sbuffer_destroy(&sb);
        hear(from_test, 20000);
        close(c);
        close(l);
        return 0;
}

/* The daemon checks the peer's user itself: one of another user that would
 * hand its memory over is not taken up. */
START_TEST(test_peer_posing_as_another_user)
{
        test_group g;
        nobody n;
        cube_client *a;
        char dir[] = "/tmp/cube-posing-XXXXXX", sock[96], link[160];
        bool can = true;

        if (!running_as_root())
                return;
        ck_assert_ptr_nonnull(mkdtemp(dir));
        ck_assert_int_eq(chown(dir, NOBODY, NOBODY), 0);
        snprintf(sock, sizeof(sock), "%s/cpu1.sock", dir);
        ck_assert_int_eq(test_group_start(&g, 1, NULL), 0);
        snprintf(link, sizeof(link), "%s/cpu1.sock", g.dir);
        ck_assert_int_eq(symlink(sock, link), 0);
        nobody_start(&n, sock, pose_as_peer);
        ck_assert_int_eq(hear(n.from_child, 10000), 'r');
        a = test_connect(g.d[0].socket, "a");
        ck_ok(cube_can_access_peer(a, "cpu1", &can));
        ck_assert_msg(!can, "a peer of another user was taken up");
        tell(n.to_child, 'q');
        ck_assert_int_eq(nobody_finish(&n), 0);
        cube_disconnect(a);
        unlink(link);
        unlink(sock);
        rmdir(dir);
        test_group_stop_clean(&g);
}
END_TEST

START_TEST(test_peer_dies)
{
        test_group g;
        cube_client *a, *b;
        uint32_t in[N], got[N];
        cube_handle src, dst, bound, local;
        bool can;
        cube_error *e;

        peers_up(&g, NULL, &a, &b);
        for (uint32_t i = 0; i < N; i++)
                in[i] = i;
        ck_ok(cube_create(a, in, sizeof(in), &src));
        ck_ok(cube_empty(b, sizeof(in), &dst));
        bound = bind_peer(b, &dst, a, "cpu1");
        uint64_t k = test_kernel(a, test_affine_source, "affine");
        test_launch_u32(a, affine_over(k, (cube_handle[]) { src, bound }), NULL, 0);
        ck_ok(cube_sync(a, &bound, 1));
        cube_disconnect(b);
        kill(g.d[1].pid, SIGKILL);
        waitpid(g.d[1].pid, NULL, 0);
        g.d[1].pid = 0;
        /* A launch that binds the dead peer's memory fails on what it
         * writes. */
        test_launch_u32(a, affine_over(k, (cube_handle[]) { src, bound }), NULL, 0);
        e = cube_sync(a, &bound, 1);
        ck_assert_msg(e && strstr(cube_error_message(e), "is gone"), "%s",
                      e ? cube_error_message(e) : "it ran");
        cube_error_free(e);
        can = true;
        ck_ok(cube_can_access_peer(a, "cpu1", &can));
        ck_assert(!can);
        /* A keeps serving. */
        ck_ok(cube_empty(a, sizeof(got), &local));
        test_launch_u32(a, affine_over(k, (cube_handle[]) { src, local }), NULL, 0);
        ck_ok(cube_read(a, &local, got, sizeof(got)));
        ck_assert_uint_eq(got[7], test_affine(7));
        ck_ok(cube_free(a, &bound));
        cube_disconnect(a);
        ck_assert_int_eq(test_daemon_stop(&g.d[0], 10000), 0);
        g.d[0].pid = 0;
        test_group_stop_clean(&g);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("peer");
        TCase *tc = tcase_create("peer");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_who_may_access);
        tcase_add_test(tc, test_kernel_writes_peer_buffer);
        tcase_add_test(tc, test_peer_failure_reaches_the_owner);
        tcase_add_test(tc, test_poisoned_peer);
        tcase_add_test(tc, test_kernel_reads_peer_buffer);
        tcase_add_test(tc, test_address_of_tainted_buffer);
        tcase_add_test(tc, test_peer_of_another_user);
        tcase_add_test(tc, test_memory_for_the_daemons_user_only);
        tcase_add_test(tc, test_peer_posing_as_another_user);
        tcase_add_test(tc, test_bind_is_for_the_daemons_user);
        tcase_add_test(tc, test_peer_dies);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
