/*
 * test-errors.c - unit tests of the error taxonomy (proto/errors.c): every
 * variant's wire round trip, the predicates as the reference's own tests pose
 * them, the messages, the accessors, and the decoder's refusals.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

#define POISON_REASON "cuEventSynchronize failed with status 700"

/* Every kind the taxonomy has: ServerError 12, LaunchError 5,
 * CompilationError 5, ResourceLimitError 3, IoError 11, ProfileError 5,
 * DevicePoison 1. */
#define N_KINDS 42

static cube_error *poison(void)
{
        return cube__err_poison(POISON_REASON);
}

/* One instance of each kind, every field away from its zero value. */
static cube_error *sample(cube_error_kind kind)
{
        static const uint32_t dim_requested[3] = { 2048, 1, 1 };
        static const uint32_t dim_max[3] = { 1024, 1024, 64 };
        cube_error *e;
        char **chain;

        switch (kind) {
        case CUBE_SERVER_VALIDATION:
                return cube__err_validation("binding %d is out of range", 3);
        case CUBE_SERVER_GENERIC:
                return cube__err_generic("the copy failed");
        case CUBE_SERVER_NO_DEVICE_TRANSPORT:
                return cube__err_no_device_transport(CUBE_COLLECTIVE_ALL_REDUCE);
        case CUBE_SERVER_FOREIGN_HANDLE:
                return cube__err_foreign_handle("cpu0-4f1c9a0d2e3b5a67", "cuda1-0123456789abcdef");
        case CUBE_SERVER_SERVICE_MISMATCH:
                return cube__err_service_mismatch("cpu0-4f1c9a0d2e3b5a67", "CudaServer");
        case CUBE_SERVER_DEVICE_POISONED:
        case CUBE_LAUNCH_DEVICE_POISONED:
        case CUBE_COMPILATION_DEVICE_POISONED:
        case CUBE_IO_DEVICE_POISONED:
                return cube__err_wrap(kind, poison());
        case CUBE_SERVER_LAUNCH:
                return cube__err_wrap(kind, sample(CUBE_LAUNCH_UNKNOWN));
        case CUBE_SERVER_IO:
                return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, 4096);
        case CUBE_SERVER_TORN_DOWN:
        case CUBE_SERVER_SKIPPED:
        case CUBE_IO_UNSUPPORTED_STRIDES:
        case CUBE_IO_UNSUPPORTED_IO_OPERATION:
        case CUBE_PROFILE_NOT_REGISTERED:
        case CUBE_PROFILE_NOT_MEASURED:
                return cube__err_new(kind);
        case CUBE_SERVER_UNWRITTEN:
                chain = calloc(2, sizeof(*chain));
                if (!chain)
                        return NULL;
                chain[0] = strdup("hop one");
                chain[1] = strdup("hop two");
                return cube__err_unwritten(UINT64_C(1) << 40, 3, chain, 2, cube__err_generic("root"));
        case CUBE_SERVER_SEVERAL:
                e = cube__err_several();
                ck_assert_int_eq(cube__err_several_add(e, sample(CUBE_SERVER_GENERIC)), 0);
                ck_assert_int_eq(cube__err_several_add(e, cube__err_new(CUBE_SERVER_SKIPPED)), 0);
                return e;
        case CUBE_LAUNCH_COMPILATION_ERROR:
                return cube__err_wrap(kind, sample(CUBE_COMPILATION_GENERIC));
        case CUBE_LAUNCH_TOO_MANY_RESOURCES:
                return cube__err_wrap(kind, sample(CUBE_RESOURCE_SHARED_MEMORY));
        case CUBE_LAUNCH_OUT_OF_MEMORY:
        case CUBE_LAUNCH_UNKNOWN:
        case CUBE_COMPILATION_UNSUPPORTED_INSTRUCTION:
        case CUBE_COMPILATION_GENERIC:
        case CUBE_COMPILATION_VALIDATION:
        case CUBE_IO_NOT_FOUND:
        case CUBE_IO_STORAGE_HANDLE_NOT_FOUND:
        case CUBE_IO_UNKNOWN:
        case CUBE_PROFILE_UNKNOWN:
                return cube__err_text(kind, "text of kind %d", (int) kind);
        case CUBE_COMPILATION_EXPANSION_PANICKED:
                return cube__err_expansion_panicked("matmul", "an assertion failed");
        case CUBE_RESOURCE_SHARED_MEMORY:
                return cube__err_resource(kind, 1 << 20, 1 << 15);
        case CUBE_RESOURCE_UNITS:
                return cube__err_resource(kind, 2048, 1024);
        case CUBE_RESOURCE_CUBE_DIM:
                return cube__err_cube_dim(dim_requested, dim_max);
        case CUBE_IO_BUFFER_TOO_BIG:
        case CUBE_IO_OUT_OF_MEMORY:
        case CUBE_IO_PAGE_UPDATE_FORBIDDEN:
        case CUBE_IO_PAGE_SIZES_EXHAUSTED:
                return cube__err_size(kind, (UINT64_C(1) << 40) + kind);
        case CUBE_IO_STORAGE_MAPPING_FAILED:
                return cube__err_storage_mapping_failed(1 << 20, sample(CUBE_IO_DEVICE_POISONED));
        case CUBE_PROFILE_LAUNCH:
                return cube__err_wrap(kind, sample(CUBE_LAUNCH_TOO_MANY_RESOURCES));
        case CUBE_PROFILE_SERVER:
                return cube__err_wrap(kind, sample(CUBE_SERVER_GENERIC));
        case CUBE_DEVICE_POISON:
                return poison();
        }
        return NULL;
}

static void pack_into(msgpack_sbuffer *sb, const cube_error *e)
{
        msgpack_packer pk;

        msgpack_sbuffer_init(sb);
        msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
        ck_assert_int_eq(cube__err_pack(&pk, e), 0);
}

/* Decodes the single value in sb as family; returns what cube__err_unpack
 * answered, with *ret set only on success. */
static int unpack_from(const msgpack_sbuffer *sb, cube__err_family family, cube_error **ret)
{
        msgpack_unpacked u;
        size_t off = 0;
        int r;

        msgpack_unpacked_init(&u);
        ck_assert_int_eq(msgpack_unpack_next(&u, sb->data, sb->size, &off),
                         MSGPACK_UNPACK_SUCCESS);
        ck_assert_uint_eq(off, sb->size);
        r = cube__err_unpack(&u.data, family, ret);
        msgpack_unpacked_destroy(&u);
        return r;
}

/* Packs, unpacks, and checks that the copy is the original, says the same,
 * and packs to the same bytes. */
static void assert_round_trip(const cube_error *e, cube__err_family family)
{
        msgpack_sbuffer sb, again;
        cube_error *back = NULL;

        ck_assert_ptr_nonnull(e);
        pack_into(&sb, e);
        ck_assert_int_eq(unpack_from(&sb, family, &back), 0);
        ck_assert_ptr_nonnull(back);

        ck_assert_msg(cube__err_equal(e, back), "round trip changed %s", cube_error_variant(e));
        ck_assert_str_eq(cube_error_message(e), cube_error_message(back));
        ck_assert_int_eq(cube_error_is_refusal(e), cube_error_is_refusal(back));
        ck_assert_int_eq(cube_error_is_device_poisoned(e), cube_error_is_device_poisoned(back));

        pack_into(&again, back);
        ck_assert_uint_eq(again.size, sb.size);
        ck_assert(memcmp(again.data, sb.data, sb.size) == 0);

        msgpack_sbuffer_destroy(&again);
        msgpack_sbuffer_destroy(&sb);
        cube_error_free(back);
}

/* ---------------------------------------------------------------------------
 * Round trip
 * ------------------------------------------------------------------------- */

START_TEST(test_round_trip_every_kind) {
        unsigned n = 0;

        for (int k = 0; k < 256; k++) {
                cube__err_family family = cube__err_family_of(k);
                cube_error *e;

                if (family == CUBE__FAMILY_INVALID)
                        continue;
                n++;

                e = sample(k);
                ck_assert_msg(e != NULL, "no sample of kind %d", k);
                ck_assert_int_eq(cube_error_kind_of(e), k);
                ck_assert_ptr_nonnull(cube_error_variant(e));
                ck_assert_ptr_nonnull(cube_error_family(e));
                assert_round_trip(e, family);
                cube_error_free(e);
        }

        ck_assert_uint_eq(n, N_KINDS);
}
END_TEST

START_TEST(test_round_trip_nested) {
        cube_error *e, *several;
        char **chain;

        /* Several[Unwritten{root: Launch(CompilationError(DevicePoisoned(..)))}] */
        chain = calloc(2, sizeof(*chain));
        ck_assert_ptr_nonnull(chain);
        chain[0] = strdup("kernel add skipped");
        chain[1] = strdup("kernel mul skipped");
        e = cube__err_wrap(CUBE_SERVER_LAUNCH,
                           cube__err_wrap(CUBE_LAUNCH_COMPILATION_ERROR,
                                          cube__err_wrap(CUBE_COMPILATION_DEVICE_POISONED, poison())));
        e = cube__err_unwritten(12, 2, chain, 2, e);
        several = cube__err_several();
        ck_assert_int_eq(cube__err_several_add(several, e), 0);
        assert_round_trip(several, CUBE__FAMILY_SERVER);
        ck_assert(cube_error_is_device_poisoned(several));
        ck_assert(!cube_error_is_refusal(several));
        ck_assert_str_eq(cube_error_message(several),
                         "Several failures at once\nCaused by:\n"
                         "  The bytes were never written (failure #12, still claiming 2 buffer(s))\n"
                         "  kernel add skipped\n"
                         "  kernel mul skipped\n"
                         "Caused by:\n"
                         "  A launch error happened\nCaused by:\n"
                         "  A compilation error happened during launch\nCaused by:\n"
                         "  The device is poisoned, the kernel could not be loaded\nCaused by:\n"
                         "  " POISON_REASON);
        cube_error_free(several);

        /* Io(StorageMappingFailed{size, source: DevicePoisoned}) */
        e = cube__err_wrap(CUBE_SERVER_IO,
                           cube__err_storage_mapping_failed(
                                   UINT64_C(3) << 30,
                                   cube__err_wrap(CUBE_IO_DEVICE_POISONED, poison())));
        assert_round_trip(e, CUBE__FAMILY_SERVER);
        ck_assert(cube_error_is_device_poisoned(e));
        ck_assert_str_eq(cube_error_message(e),
                         "An IO error happened\nCaused by:\n"
                         "  couldn't map storage for a deferred allocation of 3221225472 bytes\n"
                         "Caused by:\n"
                         "  The device is poisoned: " POISON_REASON);
        cube_error_free(e);

        /* Several with no member at all */
        e = cube__err_several();
        assert_round_trip(e, CUBE__FAMILY_SERVER);
        ck_assert_str_eq(cube_error_message(e), "Several failures at once\nCaused by:\n  ");
        cube_error_free(e);

        /* ProfileError::Server(Unwritten with an empty chain) */
        e = cube__err_wrap(CUBE_PROFILE_SERVER,
                           cube__err_unwritten(1, 0, NULL, 0, cube__err_new(CUBE_SERVER_TORN_DOWN)));
        assert_round_trip(e, CUBE__FAMILY_PROFILE);
        cube_error_free(e);
}
END_TEST

START_TEST(test_round_trip_ignores_unknown_keys) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        cube_error *e = NULL, *want;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 2);
        msgpack_pack_str_with_body(&pk, "ForeignHandle", 13);
        msgpack_pack_map(&pk, 4);
        msgpack_pack_uint8(&pk, 7);             /* a key that is not even a string */
        msgpack_pack_nil(&pk);
        msgpack_pack_str_with_body(&pk, "client", 6);
        msgpack_pack_str_with_body(&pk, "b", 1);
        msgpack_pack_str_with_body(&pk, "backtrace", 9);
        msgpack_pack_str_with_body(&pk, "somewhere", 9);
        msgpack_pack_str_with_body(&pk, "handle", 6);
        msgpack_pack_str_with_body(&pk, "a", 1);

        ck_assert_int_eq(unpack_from(&sb, CUBE__FAMILY_SERVER, &e), 0);
        want = cube__err_foreign_handle("a", "b");
        ck_assert(cube__err_equal(e, want));
        cube_error_free(want);
        cube_error_free(e);
        msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_round_trip_integer_encodings) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        cube_error *e = NULL;

        /* A signed encoding of a non-negative number is still that number. */
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 2);
        msgpack_pack_str_with_body(&pk, "BufferTooBig", 12);
        msgpack_pack_map(&pk, 1);
        msgpack_pack_str_with_body(&pk, "size", 4);
        msgpack_pack_int64(&pk, 5);
        ck_assert_int_eq(unpack_from(&sb, CUBE__FAMILY_IO, &e), 0);
        ck_assert_uint_eq(cube_error_size(e), 5);
        cube_error_free(e);
        msgpack_sbuffer_destroy(&sb);

        /* The largest u64 survives. */
        e = cube__err_size(CUBE_IO_PAGE_SIZES_EXHAUSTED, UINT64_MAX);
        assert_round_trip(e, CUBE__FAMILY_IO);
        cube_error_free(e);
}
END_TEST

START_TEST(test_clone_is_deep) {
        cube_error *e, *c;

        for (int k = 0; k < 256; k++) {
                if (cube__err_family_of(k) == CUBE__FAMILY_INVALID)
                        continue;
                e = sample(k);
                ck_assert_ptr_nonnull(e);
                (void) cube_error_message(e);
                c = cube_error_clone(e);
                ck_assert_ptr_nonnull(c);
                ck_assert(cube__err_equal(e, c));
                ck_assert_str_eq(cube_error_message(e), cube_error_message(c));
                ck_assert_ptr_ne(cube_error_message(e), cube_error_message(c));
                cube_error_free(e);
                /* still whole once the original is gone */
                ck_assert_ptr_nonnull(cube_error_message(c));
                cube_error_free(c);
        }
        ck_assert_ptr_null(cube_error_clone(NULL));
}
END_TEST

/* ---------------------------------------------------------------------------
 * Predicates: the reference's tests, case for case
 * ------------------------------------------------------------------------- */

static cube_error *unwritten_of(const cube_error *root)
{
        return cube__err_unwritten(1, 1, NULL, 0, cube_error_clone(root));
}

static cube_error *group_of(cube_error *a, cube_error *b)
{
        cube_error *g = cube__err_several();

        ck_assert_ptr_nonnull(g);
        if (a)
                ck_assert_int_eq(cube__err_several_add(g, a), 0);
        if (b)
                ck_assert_int_eq(cube__err_several_add(g, b), 0);
        return g;
}

static cube_error *refused_kernel(void)
{
        return cube__err_wrap(CUBE_SERVER_LAUNCH,
                              cube__err_wrap(CUBE_LAUNCH_COMPILATION_ERROR,
                                             cube__err_text(CUBE_COMPILATION_GENERIC,
                                                            "no such intrinsic on this target")));
}

START_TEST(test_poisoned_device_read_through_every_path) {
        cube_error *poisoned[5], *refused, *transient, *unwritten, *group;

        poisoned[0] = cube__err_wrap(CUBE_SERVER_DEVICE_POISONED, poison());
        poisoned[1] = cube__err_wrap(CUBE_SERVER_LAUNCH,
                                     cube__err_wrap(CUBE_LAUNCH_DEVICE_POISONED, poison()));
        poisoned[2] = cube__err_wrap(CUBE_SERVER_LAUNCH,
                                     cube__err_wrap(CUBE_LAUNCH_COMPILATION_ERROR,
                                                    cube__err_wrap(CUBE_COMPILATION_DEVICE_POISONED,
                                                                   poison())));
        poisoned[3] = cube__err_wrap(CUBE_SERVER_IO,
                                     cube__err_wrap(CUBE_IO_DEVICE_POISONED, poison()));
        poisoned[4] = cube__err_wrap(CUBE_SERVER_IO,
                                     cube__err_storage_mapping_failed(
                                             1 << 20,
                                             cube__err_wrap(CUBE_IO_DEVICE_POISONED, poison())));
        refused = refused_kernel();
        transient = cube__err_generic("the copy failed");

        for (size_t i = 0; i < 5; i++) {
                ck_assert_ptr_nonnull(poisoned[i]);
                ck_assert_msg(cube_error_is_device_poisoned(poisoned[i]), "%s",
                              cube_error_message(poisoned[i]));
                ck_assert_msg(!cube_error_is_refusal(poisoned[i]),
                              "a poisoned device is not a refusal: %s",
                              cube_error_message(poisoned[i]));
        }
        ck_assert(!cube_error_is_device_poisoned(refused));
        ck_assert(!cube_error_is_device_poisoned(transient));

        unwritten = unwritten_of(poisoned[1]);
        ck_assert(cube_error_is_device_poisoned(unwritten));
        group = group_of(refused, unwritten);
        ck_assert(cube_error_is_device_poisoned(group));
        ck_assert(!cube_error_is_refusal(group));

        cube_error_free(group);
        cube_error_free(transient);
        for (size_t i = 0; i < 5; i++)
                cube_error_free(poisoned[i]);
}
END_TEST

START_TEST(test_only_a_refused_kernel_reads_as_a_refusal) {
        cube_error *refused, *over_budget, *fault, *panicked, *u, *g;

        refused = refused_kernel();
        over_budget = cube__err_wrap(CUBE_SERVER_LAUNCH,
                                     cube__err_wrap(CUBE_LAUNCH_TOO_MANY_RESOURCES,
                                                    cube__err_resource(CUBE_RESOURCE_SHARED_MEMORY,
                                                                       1 << 20, 1 << 15)));
        fault = cube__err_generic("the device faulted");
        panicked = cube__err_wrap(CUBE_SERVER_LAUNCH,
                                  cube__err_wrap(CUBE_LAUNCH_COMPILATION_ERROR,
                                                 cube__err_expansion_panicked(
                                                         "kernel", "an assertion failed")));

        ck_assert(cube_error_is_refusal(refused));
        ck_assert(cube_error_is_refusal(over_budget));
        ck_assert_msg(!cube_error_is_refusal(fault), "a fault is not a refusal");
        ck_assert_msg(!cube_error_is_refusal(panicked),
                      "a kernel that panicked while expanding is a defect, not a refusal");

        u = unwritten_of(refused);
        ck_assert(cube_error_is_refusal(u));
        cube_error_free(u);
        u = unwritten_of(fault);
        ck_assert(!cube_error_is_refusal(u));
        cube_error_free(u);
        u = unwritten_of(panicked);
        ck_assert(!cube_error_is_refusal(u));
        cube_error_free(u);

        g = group_of(unwritten_of(refused), unwritten_of(over_budget));
        ck_assert(cube_error_is_refusal(g));
        cube_error_free(g);

        g = group_of(unwritten_of(refused), unwritten_of(fault));
        ck_assert_msg(!cube_error_is_refusal(g),
                      "one real failure among refusals is still a real failure");
        cube_error_free(g);

        g = group_of(NULL, NULL);
        ck_assert_msg(!cube_error_is_refusal(g), "an empty group refuses nothing");
        cube_error_free(g);

        cube_error_free(refused);
        cube_error_free(over_budget);
        cube_error_free(fault);
        cube_error_free(panicked);
}
END_TEST

START_TEST(test_predicates_on_every_family) {
        static const struct {
                cube_error_kind kind;
                bool refusal, poisoned;
        } expect[] = {
                { CUBE_LAUNCH_COMPILATION_ERROR, true, false },
                { CUBE_LAUNCH_OUT_OF_MEMORY, false, false },
                { CUBE_LAUNCH_TOO_MANY_RESOURCES, true, false },
                { CUBE_LAUNCH_DEVICE_POISONED, false, true },
                { CUBE_LAUNCH_UNKNOWN, false, false },
                { CUBE_COMPILATION_UNSUPPORTED_INSTRUCTION, true, false },
                { CUBE_COMPILATION_GENERIC, true, false },
                { CUBE_COMPILATION_VALIDATION, true, false },
                { CUBE_COMPILATION_EXPANSION_PANICKED, false, false },
                { CUBE_COMPILATION_DEVICE_POISONED, false, true },
                { CUBE_RESOURCE_SHARED_MEMORY, false, false },
                { CUBE_RESOURCE_UNITS, false, false },
                { CUBE_RESOURCE_CUBE_DIM, false, false },
                { CUBE_IO_DEVICE_POISONED, false, true },
                { CUBE_IO_STORAGE_MAPPING_FAILED, false, true },
                { CUBE_IO_OUT_OF_MEMORY, false, false },
                { CUBE_SERVER_VALIDATION, false, false },
                { CUBE_SERVER_TORN_DOWN, false, false },
                { CUBE_SERVER_SKIPPED, false, false },
                { CUBE_SERVER_IO, false, false },
                { CUBE_SERVER_DEVICE_POISONED, false, true },
                { CUBE_PROFILE_UNKNOWN, false, false },
                /* ProfileError is no refusal, but a poisoned device under it still is one */
                { CUBE_PROFILE_LAUNCH, false, false },
                { CUBE_DEVICE_POISON, false, true },
        };
        cube_error *e;

        for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
                e = sample(expect[i].kind);
                ck_assert_ptr_nonnull(e);
                ck_assert_msg(cube_error_is_refusal(e) == expect[i].refusal, "is_refusal of %s/%s",
                              cube_error_family(e), cube_error_variant(e));
                ck_assert_msg(cube_error_is_device_poisoned(e) == expect[i].poisoned,
                              "is_device_poisoned of %s/%s", cube_error_family(e),
                              cube_error_variant(e));
                cube_error_free(e);
        }

        e = cube__err_wrap(CUBE_PROFILE_SERVER, cube__err_wrap(CUBE_SERVER_DEVICE_POISONED, poison()));
        ck_assert(cube_error_is_device_poisoned(e));
        cube_error_free(e);
        e = cube__err_wrap(CUBE_PROFILE_LAUNCH, cube__err_wrap(CUBE_LAUNCH_DEVICE_POISONED, poison()));
        ck_assert(cube_error_is_device_poisoned(e));
        cube_error_free(e);

        e = cube__err_several();
        ck_assert(!cube_error_is_device_poisoned(e));
        cube_error_free(e);

        ck_assert(!cube_error_is_refusal(NULL));
        ck_assert(!cube_error_is_device_poisoned(NULL));
        ck_assert(!cube_error_may_succeed_after_reclaim(NULL));
}
END_TEST

START_TEST(test_may_succeed_after_reclaim) {
        static const cube_error_kind io[] = {
                CUBE_IO_BUFFER_TOO_BIG, CUBE_IO_OUT_OF_MEMORY, CUBE_IO_PAGE_UPDATE_FORBIDDEN,
                CUBE_IO_PAGE_SIZES_EXHAUSTED, CUBE_IO_UNSUPPORTED_STRIDES, CUBE_IO_NOT_FOUND,
                CUBE_IO_STORAGE_HANDLE_NOT_FOUND, CUBE_IO_STORAGE_MAPPING_FAILED,
                CUBE_IO_DEVICE_POISONED, CUBE_IO_UNKNOWN, CUBE_IO_UNSUPPORTED_IO_OPERATION,
        };
        cube_error *e;

        for (size_t i = 0; i < sizeof(io) / sizeof(io[0]); i++) {
                bool want = io[i] != CUBE_IO_BUFFER_TOO_BIG && io[i] != CUBE_IO_PAGE_UPDATE_FORBIDDEN;

                e = sample(io[i]);
                ck_assert_ptr_nonnull(e);
                ck_assert_msg(cube_error_may_succeed_after_reclaim(e) == want, "%s",
                              cube_error_variant(e));
                cube_error_free(e);
        }

        /* ServerError::Io answers for its source */
        e = cube__err_io_size(CUBE_IO_BUFFER_TOO_BIG, 1);
        ck_assert(!cube_error_may_succeed_after_reclaim(e));
        cube_error_free(e);
        e = cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, 1);
        ck_assert(cube_error_may_succeed_after_reclaim(e));
        cube_error_free(e);

        /* anything that is not an IoError */
        e = sample(CUBE_LAUNCH_OUT_OF_MEMORY);
        ck_assert(!cube_error_may_succeed_after_reclaim(e));
        cube_error_free(e);
        e = sample(CUBE_SERVER_GENERIC);
        ck_assert(!cube_error_may_succeed_after_reclaim(e));
        cube_error_free(e);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Messages
 * ------------------------------------------------------------------------- */

static void assert_message(cube_error *e, const char *want)
{
        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(cube_error_message(e), want);
        cube_error_free(e);
}

START_TEST(test_messages_exact) {
        static const uint32_t req[3] = { 2048, 1, 1 }, max[3] = { 1024, 1024, 64 };
        cube_error *e, *g;
        char **chain;

        assert_message(cube__err_generic("the copy failed"),
                       "An error happened during execution\nCaused by:\n  the copy failed");
        assert_message(cube__err_validation("bad %s", "binding"),
                       "A validation error happened during execution\nCaused by:\n  bad binding");
        assert_message(cube__err_foreign_handle("cpu0-aa", "cuda1-bb"),
                       "A handle of cpu0-aa was used on cuda1-bb");
        assert_message(cube__err_service_mismatch("cpu0-aa", "CudaServer"),
                       "The client reaches cpu0-aa, not a CudaServer");
        assert_message(cube__err_no_device_transport(CUBE_COLLECTIVE_ALL_REDUCE),
                       "all_reduce needs a transport between devices, and this runtime has none");
        assert_message(cube__err_no_device_transport(CUBE_COLLECTIVE_PEER_ACCESS),
                       "peer_access needs a transport between devices, and this runtime has none");
        assert_message(cube__err_cube_dim(req, max),
                       "Cube dim exceeds maximum bounds.\nRequested (2048, 1, 1), max is (1024, 1024, 64).");
        assert_message(cube__err_not_found("memory %d was never allocated", 5),
                       "An IO error happened\nCaused by:\n"
                       "  couldn't find resource for that handle: memory 5 was never allocated");
        assert_message(cube__err_text(CUBE_IO_NOT_FOUND, "gone"),
                       "couldn't find resource for that handle: gone");
        assert_message(cube__err_new(CUBE_SERVER_TORN_DOWN),
                       "The work writing this buffer was torn down before it could say what went "
                       "wrong: its write scope never reached the exit that names the real failure, "
                       "which a panic mid-launch explains");
        assert_message(cube__err_new(CUBE_SERVER_SKIPPED),
                       "The work was skipped: an input carried a failure, and the work's outputs "
                       "claim it now \xe2\x80\x94 a read of one of them names the root cause");
        assert_message(poison(), POISON_REASON);
        assert_message(cube__err_wrap(CUBE_LAUNCH_TOO_MANY_RESOURCES,
                                      cube__err_resource(CUBE_RESOURCE_SHARED_MEMORY, 1 << 20, 1 << 15)),
                       "Too many resources were requested during launch\n"
                       "Too much shared memory requested.\n"
                       "Requested 1048576 bytes, maximum 32768 bytes available.");
        assert_message(cube__err_resource(CUBE_RESOURCE_UNITS, 2048, 1024),
                       "Total unit count exceeds maximum.\nRequested 2048 units, max units is 1024.");
        assert_message(cube__err_io_size(CUBE_IO_BUFFER_TOO_BIG, 77),
                       "An IO error happened\nCaused by:\n  can't allocate buffer of size: 77");
        assert_message(cube__err_expansion_panicked("matmul", "index out of bounds"),
                       "Expanding the kernel `matmul` panicked\nCaused by:\n  index out of bounds");

        chain = calloc(2, sizeof(*chain));
        ck_assert_ptr_nonnull(chain);
        chain[0] = strdup("hop one");
        chain[1] = strdup("hop two");
        e = cube__err_unwritten(7, 3, chain, 2, cube__err_generic("root"));
        ck_assert_str_eq(cube_error_message(e),
                         "The bytes were never written (failure #7, still claiming 3 buffer(s))\n"
                         "  hop one\n"
                         "  hop two\n"
                         "Caused by:\n"
                         "  An error happened during execution\nCaused by:\n  root");

        g = cube__err_several();
        ck_assert_int_eq(cube__err_several_add(g, e), 0);
        ck_assert_int_eq(cube__err_several_add(g, cube__err_new(CUBE_SERVER_SKIPPED)), 0);
        assert_message(g,
                       "Several failures at once\nCaused by:\n"
                       "  The bytes were never written (failure #7, still claiming 3 buffer(s))\n"
                       "  hop one\n"
                       "  hop two\n"
                       "Caused by:\n"
                       "  An error happened during execution\nCaused by:\n  root\n"
                       "The work was skipped: an input carried a failure, and the work's outputs "
                       "claim it now \xe2\x80\x94 a read of one of them names the root cause");
}
END_TEST

START_TEST(test_messages_have_no_backtrace) {
        for (int k = 0; k < 256; k++) {
                const char *m;
                cube_error *e;
                size_t n;

                if (cube__err_family_of(k) == CUBE__FAMILY_INVALID)
                        continue;
                e = sample(k);
                ck_assert_ptr_nonnull(e);
                m = cube_error_message(e);
                ck_assert_ptr_nonnull(m);
                ck_assert_msg(!strstr(m, "Backtrace"), "%s says: %s", cube_error_variant(e), m);
                ck_assert_msg(!strstr(m, "Asked at"), "%s says: %s", cube_error_variant(e), m);
                n = strlen(m);
                ck_assert_msg(n > 0 && m[n - 1] != '\n', "%s ends in a newline", cube_error_variant(e));
                /* cached: the same text every time */
                ck_assert_ptr_eq(cube_error_message(e), m);
                cube_error_free(e);
        }
        ck_assert_ptr_null(cube_error_message(NULL));
}
END_TEST

START_TEST(test_message_follows_several_add) {
        cube_error *g = cube__err_several();

        ck_assert_str_eq(cube_error_message(g), "Several failures at once\nCaused by:\n  ");
        ck_assert_int_eq(cube__err_several_add(g, cube__err_generic("late")), 0);
        ck_assert_str_eq(cube_error_message(g),
                         "Several failures at once\nCaused by:\n"
                         "  An error happened during execution\nCaused by:\n  late");
        cube_error_free(g);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Malformed input
 * ------------------------------------------------------------------------- */

static void pk_str(msgpack_packer *pk, const char *s)
{
        msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void begin(msgpack_sbuffer *sb, msgpack_packer *pk)
{
        msgpack_sbuffer_init(sb);
        msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
}

/* The decoder refuses sb as family and leaves *ret alone. */
static void expect_bad(msgpack_sbuffer *sb, cube__err_family family)
{
        cube_error *sentinel = (cube_error *) (uintptr_t) 0x1;
        cube_error *e = sentinel;

        ck_assert_int_eq(unpack_from(sb, family, &e), -EBADMSG);
        ck_assert_ptr_eq(e, sentinel);
        msgpack_sbuffer_destroy(sb);
}

START_TEST(test_bad_arity) {
        msgpack_sbuffer sb;
        msgpack_packer pk;

        begin(&sb, &pk);
        msgpack_pack_array(&pk, 1);
        pk_str(&pk, "TornDown");
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        begin(&sb, &pk);
        msgpack_pack_array(&pk, 3);
        pk_str(&pk, "TornDown");
        msgpack_pack_nil(&pk);
        msgpack_pack_nil(&pk);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        begin(&sb, &pk);
        pk_str(&pk, "TornDown");
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        begin(&sb, &pk);
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "TornDown");
        msgpack_pack_nil(&pk);
        expect_bad(&sb, CUBE__FAMILY_SERVER);
}
END_TEST

START_TEST(test_bad_variant) {
        msgpack_sbuffer sb;
        msgpack_packer pk;

        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Exploded");
        msgpack_pack_nil(&pk);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        msgpack_pack_uint8(&pk, 9);
        msgpack_pack_nil(&pk);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* a prefix of a real name is not that name */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Torn");
        msgpack_pack_nil(&pk);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* an IoError where a ServerError must be */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "UnsupportedStrides");
        msgpack_pack_nil(&pk);
        expect_bad(&sb, CUBE__FAMILY_SERVER);
}
END_TEST

START_TEST(test_bad_nested_family) {
        msgpack_sbuffer sb;
        msgpack_packer pk;

        /* Launch(BufferTooBig): an IoError where a LaunchError must be */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Launch");
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "BufferTooBig");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "size");
        msgpack_pack_uint64(&pk, 1);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* DevicePoisoned must wrap a DevicePoison */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "DevicePoisoned");
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Generic");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "reason");
        pk_str(&pk, "x");
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* Several's members are ServerErrors, not LaunchErrors */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Several");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "errors");
        msgpack_pack_array(&pk, 1);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Unknown");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "reason");
        pk_str(&pk, "x");
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* TooManyResources wraps a ResourceLimitError, not a CompilationError */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "TooManyResources");
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Generic");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "reason");
        pk_str(&pk, "x");
        expect_bad(&sb, CUBE__FAMILY_LAUNCH);
}
END_TEST

START_TEST(test_bad_fields) {
        msgpack_sbuffer sb;
        msgpack_packer pk;

        /* missing field */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Generic");
        msgpack_pack_map(&pk, 0);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "ForeignHandle");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "handle");
        pk_str(&pk, "a");
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* the field under another key */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Validation");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "reason");
        pk_str(&pk, "x");
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* a string where a uint must be */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Io");
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "BufferTooBig");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "size");
        pk_str(&pk, "big");
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* a negative size */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "BufferTooBig");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "size");
        msgpack_pack_int64(&pk, -1);
        expect_bad(&sb, CUBE__FAMILY_IO);

        /* a uint where a string must be */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Generic");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "reason");
        msgpack_pack_uint8(&pk, 5);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* a payload of the wrong type */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "TornDown");
        msgpack_pack_map(&pk, 0);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Generic");
        msgpack_pack_nil(&pk);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* an operation that is no collective */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "NoDeviceTransport");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "operation");
        pk_str(&pk, "AllReduce");
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* a string holding a NUL */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Generic");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "reason");
        msgpack_pack_str_with_body(&pk, "a\0b", 3);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* a bin is not a str */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Generic");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "reason");
        msgpack_pack_bin_with_body(&pk, "ab", 2);
        expect_bad(&sb, CUBE__FAMILY_SERVER);
}
END_TEST

static void pack_unwritten_head(msgpack_packer *pk, uint64_t claimed)
{
        msgpack_pack_array(pk, 2);
        pk_str(pk, "Unwritten");
        msgpack_pack_map(pk, 4);
        pk_str(pk, "failure");
        msgpack_pack_uint64(pk, 1);
        pk_str(pk, "claimed");
        msgpack_pack_uint64(pk, claimed);
        pk_str(pk, "chain");
        msgpack_pack_array(pk, 2);
        pk_str(pk, "hop one");
        pk_str(pk, "hop two");
        pk_str(pk, "root");
}

START_TEST(test_bad_ranges) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        cube_error *e = NULL;

        /* claimed is a u32 */
        begin(&sb, &pk);
        pack_unwritten_head(&pk, UINT64_C(1) << 32);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "TornDown");
        msgpack_pack_nil(&pk);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* ...and UINT32_MAX itself fits */
        begin(&sb, &pk);
        pack_unwritten_head(&pk, UINT32_MAX);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "TornDown");
        msgpack_pack_nil(&pk);
        ck_assert_int_eq(unpack_from(&sb, CUBE__FAMILY_SERVER, &e), 0);
        ck_assert_uint_eq(cube_error_claimed(e), UINT32_MAX);
        cube_error_free(e);
        msgpack_sbuffer_destroy(&sb);

        /* a dim is a u32 */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "CubeDim");
        msgpack_pack_map(&pk, 2);
        pk_str(&pk, "requested");
        msgpack_pack_array(&pk, 3);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_uint64(&pk, UINT64_C(1) << 32);
        msgpack_pack_uint64(&pk, 1);
        pk_str(&pk, "max");
        msgpack_pack_array(&pk, 3);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_uint64(&pk, 1);
        expect_bad(&sb, CUBE__FAMILY_RESOURCE);

        /* a dim has three parts */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "CubeDim");
        msgpack_pack_map(&pk, 2);
        pk_str(&pk, "requested");
        msgpack_pack_array(&pk, 2);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_uint64(&pk, 1);
        pk_str(&pk, "max");
        msgpack_pack_array(&pk, 3);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_uint64(&pk, 1);
        expect_bad(&sb, CUBE__FAMILY_RESOURCE);

        /* Units are u32 */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Units");
        msgpack_pack_map(&pk, 2);
        pk_str(&pk, "requested");
        msgpack_pack_uint64(&pk, UINT64_C(1) << 33);
        pk_str(&pk, "max");
        msgpack_pack_uint64(&pk, 1024);
        expect_bad(&sb, CUBE__FAMILY_RESOURCE);
}
END_TEST

/* Refusals after part of the tree was built: ASan and valgrind check that
 * nothing built so far leaks. */
START_TEST(test_bad_after_partial_decode) {
        msgpack_sbuffer sb;
        msgpack_packer pk;

        /* Unwritten with its chain decoded and a broken root */
        begin(&sb, &pk);
        pack_unwritten_head(&pk, 1);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Launch");
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "CompilationError");
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Generic");
        msgpack_pack_map(&pk, 0);
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* Several whose third member is broken */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Several");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "errors");
        msgpack_pack_array(&pk, 3);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Generic");
        msgpack_pack_map(&pk, 1);
        pk_str(&pk, "reason");
        pk_str(&pk, "first");
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Skipped");
        msgpack_pack_nil(&pk);
        msgpack_pack_array(&pk, 1);
        pk_str(&pk, "TornDown");
        expect_bad(&sb, CUBE__FAMILY_SERVER);

        /* ExpansionPanicked with its kernel decoded and a broken message */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "ExpansionPanicked");
        msgpack_pack_map(&pk, 2);
        pk_str(&pk, "kernel");
        pk_str(&pk, "matmul");
        pk_str(&pk, "message");
        msgpack_pack_nil(&pk);
        expect_bad(&sb, CUBE__FAMILY_COMPILATION);

        /* a chain entry that is not a string */
        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Unwritten");
        msgpack_pack_map(&pk, 4);
        pk_str(&pk, "failure");
        msgpack_pack_uint64(&pk, 1);
        pk_str(&pk, "claimed");
        msgpack_pack_uint64(&pk, 1);
        pk_str(&pk, "chain");
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "hop");
        msgpack_pack_uint8(&pk, 1);
        pk_str(&pk, "root");
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "Skipped");
        msgpack_pack_nil(&pk);
        expect_bad(&sb, CUBE__FAMILY_SERVER);
}
END_TEST

static msgpack_object str_object(const char *s)
{
        msgpack_object o = { .type = MSGPACK_OBJECT_STR };

        o.via.str.ptr = s;
        o.via.str.size = (uint32_t) strlen(s);
        return o;
}

/* Several{errors: [Several{errors: [...]}]}, levels deep, built as objects
 * directly: msgpack-c's own unpacker stops at 32 containers, and the point is
 * that the decoder holds its bound whoever hands it the object. */
static msgpack_object *nested_several(msgpack_zone *z, unsigned levels)
{
        msgpack_object *inner = NULL;

        for (unsigned i = 0; i < levels; i++) {
                msgpack_object *value = msgpack_zone_malloc(z, sizeof(*value));
                msgpack_object *pair = msgpack_zone_malloc(z, 2 * sizeof(*pair));
                msgpack_object_kv *kv = msgpack_zone_malloc(z, sizeof(*kv));

                ck_assert(value && pair && kv);
                kv->key = str_object("errors");
                kv->val.type = MSGPACK_OBJECT_ARRAY;
                kv->val.via.array.size = inner ? 1 : 0;
                kv->val.via.array.ptr = inner;
                pair[0] = str_object("Several");
                pair[1].type = MSGPACK_OBJECT_MAP;
                pair[1].via.map.size = 1;
                pair[1].via.map.ptr = kv;
                value->type = MSGPACK_OBJECT_ARRAY;
                value->via.array.size = 2;
                value->via.array.ptr = pair;
                inner = value;
        }
        return inner;
}

START_TEST(test_bad_depth) {
        msgpack_zone *z = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
        cube_error *e = NULL;
        const cube_error *walk;
        unsigned n;

        ck_assert_ptr_nonnull(z);

        ck_assert_int_eq(cube__err_unpack(nested_several(z, 100), CUBE__FAMILY_SERVER, &e), -EBADMSG);
        ck_assert_ptr_null(e);
        ck_assert_int_eq(cube__err_unpack(nested_several(z, 65), CUBE__FAMILY_SERVER, &e), -EBADMSG);
        ck_assert_ptr_null(e);

        /* 64 levels is the most there may be */
        ck_assert_int_eq(cube__err_unpack(nested_several(z, 64), CUBE__FAMILY_SERVER, &e), 0);
        for (n = 0, walk = e; walk; walk = cube_error_at(walk, 0))
                n++;
        ck_assert_uint_eq(n, 64);
        cube_error_free(e);

        msgpack_zone_free(z);
}
END_TEST

START_TEST(test_bad_family_argument) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        cube_error *e = NULL;

        begin(&sb, &pk);
        msgpack_pack_array(&pk, 2);
        pk_str(&pk, "TornDown");
        msgpack_pack_nil(&pk);
        ck_assert_int_eq(unpack_from(&sb, CUBE__FAMILY_INVALID, &e), -EBADMSG);
        ck_assert_ptr_null(e);
        msgpack_sbuffer_destroy(&sb);

        ck_assert_int_eq(cube__err_unpack(NULL, CUBE__FAMILY_SERVER, &e), -EBADMSG);
        ck_assert_ptr_null(e);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Accessors
 * ------------------------------------------------------------------------- */

START_TEST(test_accessors) {
        uint32_t dim[3] = { 0 };
        cube_error *e;

        e = sample(CUBE_SERVER_FOREIGN_HANDLE);
        ck_assert_str_eq(cube_error_variant(e), "ForeignHandle");
        ck_assert_str_eq(cube_error_family(e), "ServerError");
        ck_assert_str_eq(cube_error_handle_service(e), "cpu0-4f1c9a0d2e3b5a67");
        ck_assert_str_eq(cube_error_client_service(e), "cuda1-0123456789abcdef");
        ck_assert_ptr_null(cube_error_requested_service(e));
        ck_assert_ptr_null(cube_error_reason(e));
        ck_assert_ptr_null(cube_error_source(e));
        ck_assert_uint_eq(cube_error_size(e), 0);
        ck_assert_int_eq(cube_error_operation(e), -1);
        ck_assert_uint_eq(cube_error_count(e), 0);
        cube_error_free(e);

        e = sample(CUBE_SERVER_SERVICE_MISMATCH);
        ck_assert_str_eq(cube_error_client_service(e), "cpu0-4f1c9a0d2e3b5a67");
        ck_assert_str_eq(cube_error_requested_service(e), "CudaServer");
        ck_assert_ptr_null(cube_error_handle_service(e));
        cube_error_free(e);

        e = sample(CUBE_COMPILATION_EXPANSION_PANICKED);
        ck_assert_str_eq(cube_error_variant(e), "ExpansionPanicked");
        ck_assert_str_eq(cube_error_family(e), "CompilationError");
        ck_assert_str_eq(cube_error_kernel(e), "matmul");
        ck_assert_str_eq(cube_error_panic_message(e), "an assertion failed");
        ck_assert_ptr_null(cube_error_reason(e));
        cube_error_free(e);

        e = cube__err_validation("the message");
        ck_assert_str_eq(cube_error_reason(e), "the message");
        ck_assert_ptr_null(cube_error_kernel(e));
        cube_error_free(e);
        e = cube__err_text(CUBE_IO_UNKNOWN, "the description");
        ck_assert_str_eq(cube_error_reason(e), "the description");
        cube_error_free(e);

        e = sample(CUBE_RESOURCE_SHARED_MEMORY);
        ck_assert_str_eq(cube_error_family(e), "ResourceLimitError");
        ck_assert_uint_eq(cube_error_requested(e), 1 << 20);
        ck_assert_uint_eq(cube_error_max(e), 1 << 15);
        ck_assert(!cube_error_requested_dim(e, dim));
        ck_assert(!cube_error_max_dim(e, dim));
        cube_error_free(e);

        e = sample(CUBE_RESOURCE_CUBE_DIM);
        ck_assert(cube_error_requested_dim(e, dim));
        ck_assert_uint_eq(dim[0], 2048);
        ck_assert_uint_eq(dim[1], 1);
        ck_assert_uint_eq(dim[2], 1);
        ck_assert(cube_error_max_dim(e, dim));
        ck_assert_uint_eq(dim[0], 1024);
        ck_assert_uint_eq(dim[1], 1024);
        ck_assert_uint_eq(dim[2], 64);
        ck_assert_uint_eq(cube_error_requested(e), 0);
        ck_assert_uint_eq(cube_error_max(e), 0);
        cube_error_free(e);

        e = sample(CUBE_SERVER_NO_DEVICE_TRANSPORT);
        ck_assert_int_eq(cube_error_operation(e), CUBE_COLLECTIVE_ALL_REDUCE);
        cube_error_free(e);

        e = sample(CUBE_SERVER_UNWRITTEN);
        ck_assert_str_eq(cube_error_variant(e), "Unwritten");
        ck_assert_uint_eq(cube_error_failure(e), UINT64_C(1) << 40);
        ck_assert_uint_eq(cube_error_claimed(e), 3);
        ck_assert_uint_eq(cube_error_chain_len(e), 2);
        ck_assert_str_eq(cube_error_chain_at(e, 0), "hop one");
        ck_assert_str_eq(cube_error_chain_at(e, 1), "hop two");
        ck_assert_ptr_null(cube_error_chain_at(e, 2));
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_SERVER_GENERIC);
        ck_assert_str_eq(cube_error_reason(cube_error_source(e)), "root");
        ck_assert_ptr_eq(cube_error_root(e), cube_error_source(e));
        ck_assert_uint_eq(cube_error_count(e), 0);
        ck_assert_ptr_null(cube_error_at(e, 0));
        cube_error_free(e);

        e = sample(CUBE_SERVER_SEVERAL);
        ck_assert_uint_eq(cube_error_count(e), 2);
        ck_assert_int_eq(cube_error_kind_of(cube_error_at(e, 0)), CUBE_SERVER_GENERIC);
        ck_assert_int_eq(cube_error_kind_of(cube_error_at(e, 1)), CUBE_SERVER_SKIPPED);
        ck_assert_ptr_null(cube_error_at(e, 2));
        ck_assert_ptr_null(cube_error_source(e));
        ck_assert_uint_eq(cube_error_failure(e), 0);
        ck_assert_uint_eq(cube_error_chain_len(e), 0);
        cube_error_free(e);

        e = sample(CUBE_LAUNCH_COMPILATION_ERROR);
        ck_assert_str_eq(cube_error_variant(e), "CompilationError");
        ck_assert_str_eq(cube_error_family(e), "LaunchError");
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_COMPILATION_GENERIC);
        cube_error_free(e);

        e = sample(CUBE_IO_STORAGE_MAPPING_FAILED);
        ck_assert_uint_eq(cube_error_size(e), 1 << 20);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_IO_DEVICE_POISONED);
        ck_assert_str_eq(cube_error_variant(cube_error_source(e)), "DevicePoisoned");
        ck_assert_str_eq(cube_error_family(cube_error_source(e)), "IoError");
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(cube_error_source(e))),
                         CUBE_DEVICE_POISON);
        cube_error_free(e);

        e = poison();
        ck_assert_str_eq(cube_error_variant(e), "DevicePoison");
        ck_assert_str_eq(cube_error_family(e), "DevicePoison");
        ck_assert_str_eq(cube_error_reason(e), POISON_REASON);
        ck_assert_ptr_null(cube_error_source(e));
        cube_error_free(e);

        e = sample(CUBE_IO_BUFFER_TOO_BIG);
        ck_assert_uint_eq(cube_error_size(e), (UINT64_C(1) << 40) + CUBE_IO_BUFFER_TOO_BIG);
        ck_assert_uint_eq(cube_error_requested(e), 0);
        cube_error_free(e);

        /* no error at all */
        ck_assert_int_eq(cube_error_kind_of(NULL), 0);
        ck_assert_ptr_null(cube_error_variant(NULL));
        ck_assert_ptr_null(cube_error_family(NULL));
        ck_assert_ptr_null(cube_error_reason(NULL));
        ck_assert_ptr_null(cube_error_kernel(NULL));
        ck_assert_ptr_null(cube_error_panic_message(NULL));
        ck_assert_ptr_null(cube_error_handle_service(NULL));
        ck_assert_ptr_null(cube_error_client_service(NULL));
        ck_assert_ptr_null(cube_error_requested_service(NULL));
        ck_assert_uint_eq(cube_error_size(NULL), 0);
        ck_assert_uint_eq(cube_error_requested(NULL), 0);
        ck_assert_uint_eq(cube_error_max(NULL), 0);
        ck_assert(!cube_error_requested_dim(NULL, dim));
        ck_assert(!cube_error_max_dim(NULL, dim));
        ck_assert_int_eq(cube_error_operation(NULL), -1);
        ck_assert_uint_eq(cube_error_failure(NULL), 0);
        ck_assert_uint_eq(cube_error_claimed(NULL), 0);
        ck_assert_uint_eq(cube_error_chain_len(NULL), 0);
        ck_assert_ptr_null(cube_error_chain_at(NULL, 0));
        ck_assert_ptr_null(cube_error_source(NULL));
        ck_assert_uint_eq(cube_error_count(NULL), 0);
        ck_assert_ptr_null(cube_error_at(NULL, 0));
        cube_error_free(NULL);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Constructors and the encoder's failures
 * ------------------------------------------------------------------------- */

START_TEST(test_constructors_refuse_misfits) {
        char **chain;

        /* each of these consumes what it was given; ASan/valgrind see any leak */
        ck_assert_ptr_null(cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_size(CUBE_IO_BUFFER_TOO_BIG, 1)));
        ck_assert_ptr_null(cube__err_wrap(CUBE_SERVER_GENERIC, cube__err_generic("x")));
        ck_assert_ptr_null(cube__err_wrap(CUBE_SERVER_DEVICE_POISONED, NULL));
        ck_assert_ptr_null(cube__err_storage_mapping_failed(1, cube__err_generic("x")));
        ck_assert_ptr_null(cube__err_io_size(CUBE_IO_NOT_FOUND, 1));
        ck_assert_ptr_null(cube__err_size(CUBE_SERVER_GENERIC, 1));
        ck_assert_ptr_null(cube__err_resource(CUBE_RESOURCE_CUBE_DIM, 1, 1));
        ck_assert_ptr_null(cube__err_text(CUBE_SERVER_TORN_DOWN, "x"));
        ck_assert_ptr_null(cube__err_new(CUBE_SERVER_LAUNCH));
        ck_assert_ptr_null(cube__err_new((cube_error_kind) 999));
        ck_assert_ptr_null(cube__err_no_device_transport(CUBE_COLLECTIVE_MAX_));

        chain = calloc(1, sizeof(*chain));
        ck_assert_ptr_nonnull(chain);
        chain[0] = strdup("hop");
        ck_assert_ptr_null(cube__err_unwritten(1, 1, chain, 1, poison()));
        chain = calloc(1, sizeof(*chain));
        ck_assert_ptr_nonnull(chain);
        chain[0] = strdup("hop");
        ck_assert_ptr_null(cube__err_unwritten(1, 1, chain, 1, NULL));

        ck_assert_int_eq(cube__err_several_add(NULL, cube__err_generic("x")), -EINVAL);
}
END_TEST

START_TEST(test_several_add) {
        cube_error *g = cube__err_several(), *e;

        ck_assert_int_eq(cube__err_several_add(g, NULL), -ENOMEM);
        ck_assert_int_eq(cube__err_several_add(g, poison()), -EINVAL);
        ck_assert_int_eq(cube__err_several_add(g, cube__err_new(CUBE_IO_UNSUPPORTED_STRIDES)), -EINVAL);
        ck_assert_uint_eq(cube_error_count(g), 0);

        e = cube__err_generic("x");
        ck_assert_int_eq(cube__err_several_add(e, cube__err_generic("y")), -EINVAL);
        cube_error_free(e);

        for (int i = 0; i < 10; i++)
                ck_assert_int_eq(cube__err_several_add(g, cube__err_generic("member %d", i)), 0);
        ck_assert_uint_eq(cube_error_count(g), 10);
        ck_assert_str_eq(cube_error_reason(cube_error_at(g, 9)), "member 9");
        cube_error_free(g);

        /* Units saturate at the reference's u32 */
        e = cube__err_resource(CUBE_RESOURCE_UNITS, UINT64_C(1) << 40, 1024);
        ck_assert_uint_eq(cube_error_requested(e), UINT32_MAX);
        assert_round_trip(e, CUBE__FAMILY_RESOURCE);
        cube_error_free(e);
}
END_TEST

START_TEST(test_equal) {
        cube_error *a = sample(CUBE_SERVER_UNWRITTEN), *b = sample(CUBE_SERVER_UNWRITTEN), *c;

        ck_assert(cube__err_equal(a, b));
        ck_assert(cube__err_equal(NULL, NULL));
        ck_assert(!cube__err_equal(a, NULL));
        /* a rendered message is no part of the value */
        (void) cube_error_message(a);
        ck_assert(cube__err_equal(a, b));

        c = cube__err_unwritten(UINT64_C(1) << 40, 3, NULL, 0, cube__err_generic("root"));
        ck_assert(!cube__err_equal(a, c));
        cube_error_free(c);

        c = cube__err_generic("a");
        ck_assert(!cube__err_equal(a, c));
        cube_error_free(c);

        cube_error_free(a);
        cube_error_free(b);
}
END_TEST

/* A packer sink that holds only budget bytes, as a full buffer would. */
struct sink {
        size_t budget, used;
};

static int sink_write(void *data, const char *buf, size_t len)
{
        struct sink *s = data;

        (void) buf;
        if (s->used + len > s->budget)
                return -1;
        s->used += len;
        return 0;
}

START_TEST(test_pack_reports_write_failures) {
        cube_error *e = cube__err_several();
        msgpack_sbuffer sb;
        msgpack_packer pk;

        ck_assert_int_eq(cube__err_several_add(e, sample(CUBE_SERVER_UNWRITTEN)), 0);
        ck_assert_int_eq(cube__err_several_add(e, sample(CUBE_SERVER_DEVICE_POISONED)), 0);
        ck_assert_int_eq(cube__err_several_add(e, sample(CUBE_SERVER_NO_DEVICE_TRANSPORT)), 0);
        ck_assert_int_eq(cube__err_several_add(e, cube__err_wrap(CUBE_SERVER_LAUNCH,
                                                                  sample(CUBE_LAUNCH_TOO_MANY_RESOURCES))),
                         0);
        ck_assert_int_eq(cube__err_several_add(e, cube__err_wrap(CUBE_SERVER_IO,
                                                                  sample(CUBE_IO_STORAGE_MAPPING_FAILED))),
                         0);
        ck_assert_int_eq(cube__err_several_add(e, sample(CUBE_SERVER_FOREIGN_HANDLE)), 0);
        pack_into(&sb, e);

        /* every cut short of the whole encoding is reported */
        for (size_t budget = 0; budget < sb.size; budget++) {
                struct sink s = { .budget = budget };

                msgpack_packer_init(&pk, &s, sink_write);
                ck_assert_int_eq(cube__err_pack(&pk, e), -ENOMEM);
        }

        msgpack_sbuffer_destroy(&sb);
        cube_error_free(e);
}
END_TEST

static Suite *errors_suite(void)
{
        Suite *s = suite_create("errors");
        TCase *tc;

        tc = tcase_create("round_trip");
        tcase_add_test(tc, test_round_trip_every_kind);
        tcase_add_test(tc, test_round_trip_nested);
        tcase_add_test(tc, test_round_trip_ignores_unknown_keys);
        tcase_add_test(tc, test_round_trip_integer_encodings);
        tcase_add_test(tc, test_clone_is_deep);
        suite_add_tcase(s, tc);

        tc = tcase_create("predicates");
        tcase_add_test(tc, test_poisoned_device_read_through_every_path);
        tcase_add_test(tc, test_only_a_refused_kernel_reads_as_a_refusal);
        tcase_add_test(tc, test_predicates_on_every_family);
        tcase_add_test(tc, test_may_succeed_after_reclaim);
        suite_add_tcase(s, tc);

        tc = tcase_create("messages");
        tcase_add_test(tc, test_messages_exact);
        tcase_add_test(tc, test_messages_have_no_backtrace);
        tcase_add_test(tc, test_message_follows_several_add);
        suite_add_tcase(s, tc);

        tc = tcase_create("malformed");
        tcase_add_test(tc, test_bad_arity);
        tcase_add_test(tc, test_bad_variant);
        tcase_add_test(tc, test_bad_nested_family);
        tcase_add_test(tc, test_bad_fields);
        tcase_add_test(tc, test_bad_ranges);
        tcase_add_test(tc, test_bad_after_partial_decode);
        tcase_add_test(tc, test_bad_depth);
        tcase_add_test(tc, test_bad_family_argument);
        suite_add_tcase(s, tc);

        tc = tcase_create("accessors");
        tcase_add_test(tc, test_accessors);
        suite_add_tcase(s, tc);

        tc = tcase_create("constructors");
        tcase_add_test(tc, test_constructors_refuse_misfits);
        tcase_add_test(tc, test_several_add);
        tcase_add_test(tc, test_equal);
        tcase_add_test(tc, test_pack_reports_write_failures);
        suite_add_tcase(s, tc);

        return s;
}

int main(void)
{
        Suite *s = errors_suite();
        SRunner *sr = srunner_create(s);
        int nf;

        srunner_run_all(sr, CK_ENV);
        nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? 1 : 0;
}
