/*
 * errors.c - the error taxonomy: building cube_error trees, what they say,
 * and the predicates callers branch on (their msgpack encoding is in
 * errors-wire.c).
 *
 * The tree mirrors the reference's enums (ServerError, LaunchError,
 * CompilationError, ResourceLimitError, IoError, ProfileError, DevicePoison)
 * variant for variant, so that both ends of the socket answer is_refusal and
 * is_device_poisoned exactly as the reference does, from the structure and
 * never from the message. Everything that differs per variant (its name, its
 * family, the shape of its payload, the words around its fields) lives in one
 * table indexed by kind.
 *
 * It is long (about 1,100 lines) because the taxonomy is wide: a table entry,
 * a constructor and an accessor per variant and field, kept beside the
 * predicates that read them so a new variant is added in one file.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "errors-table.h"
#include "wire.h"

#define F(x) CUBE__FAMILY_##x

const struct cube__err_info cube__err_table[CUBE__ERR_KINDS] = {
        /* ServerError */
        [CUBE_SERVER_VALIDATION] = {
                "Validation", F(SERVER), PAYLOAD_TEXT, .key = "message",
                .lead = "A validation error happened during execution\nCaused by:\n  " },
        [CUBE_SERVER_GENERIC] = {
                "Generic", F(SERVER), PAYLOAD_TEXT, .key = "reason",
                .lead = "An error happened during execution\nCaused by:\n  " },
        [CUBE_SERVER_NO_DEVICE_TRANSPORT] = {
                "NoDeviceTransport", F(SERVER), PAYLOAD_OPERATION,
                .tail = " needs a transport between devices, and this runtime has none" },
        [CUBE_SERVER_FOREIGN_HANDLE] = {
                "ForeignHandle", F(SERVER), PAYLOAD_TEXT_PAIR, .key = "handle", .key2 = "client",
                .lead = "A handle of ", .mid = " was used on " },
        [CUBE_SERVER_SERVICE_MISMATCH] = {
                "ServiceMismatch", F(SERVER), PAYLOAD_TEXT_PAIR, .key = "client", .key2 = "requested",
                .lead = "The client reaches ", .mid = ", not a " },
        [CUBE_SERVER_DEVICE_POISONED] = {
                "DevicePoisoned", F(SERVER), PAYLOAD_WRAP, F(POISON),
                .lead = "The device is poisoned\nCaused by:\n  " },
        [CUBE_SERVER_LAUNCH] = {
                "Launch", F(SERVER), PAYLOAD_WRAP, F(LAUNCH),
                .lead = "A launch error happened\nCaused by:\n  " },
        [CUBE_SERVER_IO] = {
                "Io", F(SERVER), PAYLOAD_WRAP, F(IO),
                .lead = "An IO error happened\nCaused by:\n  " },
        [CUBE_SERVER_TORN_DOWN] = {
                "TornDown", F(SERVER), PAYLOAD_UNIT,
                .lead = "The work writing this buffer was torn down before it could say what went "
                        "wrong: its write scope never reached the exit that names the real failure, "
                        "which a panic mid-launch explains" },
        [CUBE_SERVER_UNWRITTEN] = {
                "Unwritten", F(SERVER), PAYLOAD_UNWRITTEN, F(SERVER),
                .lead = "The bytes were never written (failure #", .mid = ", still claiming ",
                .tail = " buffer(s))\n" },
        [CUBE_SERVER_SKIPPED] = {
                "Skipped", F(SERVER), PAYLOAD_UNIT,
                .lead = "The work was skipped: an input carried a failure, and the work's outputs "
                        "claim it now \xe2\x80\x94" " a read of one of them names the root cause" },
        [CUBE_SERVER_SEVERAL] = {
                "Several", F(SERVER), PAYLOAD_SEVERAL, F(SERVER),
                .lead = "Several failures at once\nCaused by:\n  " },

        /* LaunchError */
        [CUBE_LAUNCH_COMPILATION_ERROR] = {
                "CompilationError", F(LAUNCH), PAYLOAD_WRAP, F(COMPILATION),
                .lead = "A compilation error happened during launch\nCaused by:\n  " },
        [CUBE_LAUNCH_OUT_OF_MEMORY] = {
                "OutOfMemory", F(LAUNCH), PAYLOAD_TEXT, .key = "reason",
                .lead = "An out-of-memory error happened during launch\nCaused by:\n  " },
        [CUBE_LAUNCH_TOO_MANY_RESOURCES] = {
                "TooManyResources", F(LAUNCH), PAYLOAD_WRAP, F(RESOURCE),
                .lead = "Too many resources were requested during launch\n" },
        [CUBE_LAUNCH_DEVICE_POISONED] = {
                "DevicePoisoned", F(LAUNCH), PAYLOAD_WRAP, F(POISON),
                .lead = "The device was poisoned during launch\nCaused by:\n  " },
        [CUBE_LAUNCH_UNKNOWN] = {
                "Unknown", F(LAUNCH), PAYLOAD_TEXT, .key = "reason",
                .lead = "An unknown error happened during launch\nCaused by:\n  " },

        /* CompilationError */
        [CUBE_COMPILATION_UNSUPPORTED_INSTRUCTION] = {
                "UnsupportedInstruction", F(COMPILATION), PAYLOAD_TEXT, .key = "reason",
                .lead = "An unsupported instruction caused the compilation to fail\nCaused by:\n  " },
        [CUBE_COMPILATION_GENERIC] = {
                "Generic", F(COMPILATION), PAYLOAD_TEXT, .key = "reason",
                .lead = "An error caused the compilation to fail\nCaused by:\n  " },
        [CUBE_COMPILATION_VALIDATION] = {
                "Validation", F(COMPILATION), PAYLOAD_TEXT, .key = "reason",
                .lead = "A validation error caused the compilation to fail\nCaused by:\n  " },
        [CUBE_COMPILATION_EXPANSION_PANICKED] = {
                "ExpansionPanicked", F(COMPILATION), PAYLOAD_TEXT_PAIR,
                .key = "kernel", .key2 = "message",
                .lead = "Expanding the kernel `", .mid = "` panicked\nCaused by:\n  " },
        [CUBE_COMPILATION_DEVICE_POISONED] = {
                "DevicePoisoned", F(COMPILATION), PAYLOAD_WRAP, F(POISON),
                .lead = "The device is poisoned, the kernel could not be loaded\nCaused by:\n  " },

        /* ResourceLimitError */
        [CUBE_RESOURCE_SHARED_MEMORY] = {
                "SharedMemory", F(RESOURCE), PAYLOAD_LIMIT,
                .lead = "Too much shared memory requested.\nRequested ",
                .mid = " bytes, maximum ", .tail = " bytes available." },
        [CUBE_RESOURCE_UNITS] = {
                "Units", F(RESOURCE), PAYLOAD_LIMIT, .narrow = true,
                .lead = "Total unit count exceeds maximum.\nRequested ",
                .mid = " units, max units is ", .tail = "." },
        [CUBE_RESOURCE_CUBE_DIM] = {
                "CubeDim", F(RESOURCE), PAYLOAD_DIM,
                .lead = "Cube dim exceeds maximum bounds.\nRequested ", .mid = ", max is ",
                .tail = "." },

        /* IoError */
        [CUBE_IO_BUFFER_TOO_BIG] = {
                "BufferTooBig", F(IO), PAYLOAD_SIZE,
                .lead = "can't allocate buffer of size: " },
        [CUBE_IO_OUT_OF_MEMORY] = {
                "OutOfMemory", F(IO), PAYLOAD_SIZE,
                .lead = "out of device memory allocating ", .tail = " bytes" },
        [CUBE_IO_PAGE_UPDATE_FORBIDDEN] = {
                "PageUpdateForbidden", F(IO), PAYLOAD_SIZE,
                .lead = "No room for ",
                .tail = " bytes in the memory held, and no page may be added (a graph capture is "
                        "recording: warm up with the same workload first)" },
        [CUBE_IO_PAGE_SIZES_EXHAUSTED] = {
                "PageSizesExhausted", F(IO), PAYLOAD_SIZE,
                .lead = "Can't allocate ",
                .tail = " bytes: every page size the memory tracks still holds live allocations" },
        [CUBE_IO_UNSUPPORTED_STRIDES] = {
                "UnsupportedStrides", F(IO), PAYLOAD_UNIT,
                .lead = "the provided strides are not supported for this operation" },
        [CUBE_IO_NOT_FOUND] = {
                "NotFound", F(IO), PAYLOAD_TEXT, .key = "reason",
                .lead = "couldn't find resource for that handle: " },
        [CUBE_IO_STORAGE_HANDLE_NOT_FOUND] = {
                "StorageHandleNotFound", F(IO), PAYLOAD_TEXT, .key = "reason",
                .lead = "the storage holds no allocation for that handle: " },
        [CUBE_IO_STORAGE_MAPPING_FAILED] = {
                "StorageMappingFailed", F(IO), PAYLOAD_MAPPING, F(IO),
                .lead = "couldn't map storage for a deferred allocation of ",
                .mid = " bytes\nCaused by:\n  " },
        [CUBE_IO_DEVICE_POISONED] = {
                "DevicePoisoned", F(IO), PAYLOAD_WRAP, F(POISON),
                .lead = "The device is poisoned: " },
        [CUBE_IO_UNKNOWN] = {
                "Unknown", F(IO), PAYLOAD_TEXT, .key = "description",
                .lead = "Unknown error happened during execution: " },
        [CUBE_IO_UNSUPPORTED_IO_OPERATION] = {
                "UnsupportedIoOperation", F(IO), PAYLOAD_UNIT,
                .lead = "The current IO operation is not supported" },

        /* ProfileError */
        [CUBE_PROFILE_UNKNOWN] = {
                "Unknown", F(PROFILE), PAYLOAD_TEXT, .key = "reason",
                .lead = "An unknown error happened during profiling\nCaused by:\n  " },
        [CUBE_PROFILE_NOT_REGISTERED] = {
                "NotRegistered", F(PROFILE), PAYLOAD_UNIT,
                .lead = "No profiling registered" },
        [CUBE_PROFILE_NOT_MEASURED] = {
                "NotMeasured", F(PROFILE), PAYLOAD_UNIT,
                .lead = "The profiled window resolved no device timing" },
        [CUBE_PROFILE_LAUNCH] = {
                "Launch", F(PROFILE), PAYLOAD_WRAP, F(LAUNCH),
                .lead = "A launch error happened during profiling\nCaused by:\n  " },
        [CUBE_PROFILE_SERVER] = {
                "Server", F(PROFILE), PAYLOAD_WRAP, F(SERVER),
                .lead = "An execution error happened during profiling\nCaused by:\n  " },

        /* DevicePoison renders as its reason alone */
        [CUBE_DEVICE_POISON] = {
                "DevicePoison", F(POISON), PAYLOAD_TEXT, .key = "reason" },
};

#undef F

static const char *const family_names[] = {
        [CUBE__FAMILY_SERVER] = "ServerError",
        [CUBE__FAMILY_LAUNCH] = "LaunchError",
        [CUBE__FAMILY_COMPILATION] = "CompilationError",
        [CUBE__FAMILY_RESOURCE] = "ResourceLimitError",
        [CUBE__FAMILY_IO] = "IoError",
        [CUBE__FAMILY_PROFILE] = "ProfileError",
        [CUBE__FAMILY_POISON] = "DevicePoison",
};

/* The reference's Display of Collective, which is also its wire name. */
const char *const cube__err_collective_names[CUBE_COLLECTIVE_MAX_] = {
        [CUBE_COLLECTIVE_COMM_INIT] = "comm_init",
        [CUBE_COLLECTIVE_ALL_REDUCE] = "all_reduce",
        [CUBE_COLLECTIVE_ALL_GATHER] = "all_gather",
        [CUBE_COLLECTIVE_REDUCE_SCATTER] = "reduce_scatter",
        [CUBE_COLLECTIVE_BROADCAST] = "broadcast",
        [CUBE_COLLECTIVE_ALL_TO_ALL] = "all_to_all",
        [CUBE_COLLECTIVE_SEND] = "send",
        [CUBE_COLLECTIVE_RECV] = "recv",
        [CUBE_COLLECTIVE_SYNC_COLLECTIVE] = "sync_collective",
        [CUBE_COLLECTIVE_PEER_ACCESS] = "peer_access",
};

const struct cube__err_info *cube__err_info(cube_error_kind kind)
{
        if ((unsigned) kind >= sizeof(cube__err_table) / sizeof(cube__err_table[0]))
                return NULL;
        if (!cube__err_table[kind].name)
                return NULL;
        return &cube__err_table[kind];
}

enum cube__err_payload cube__err_payload(const cube_error *e)
{
        const struct cube__err_info *info = e ? cube__err_info(e->kind) : NULL;

        return info ? info->payload : PAYLOAD_UNIT;
}

cube__err_family cube__err_family_of(cube_error_kind kind)
{
        const struct cube__err_info *info = cube__err_info(kind);

        return info ? info->family : CUBE__FAMILY_INVALID;
}

/* The single error a wrapping variant, StorageMappingFailed or Unwritten
 * stands on; NULL for every other kind. */
const cube_error *cube__err_source(const cube_error *e)
{
        switch (cube__err_payload(e)) {
        case PAYLOAD_WRAP:
        case PAYLOAD_MAPPING:
        case PAYLOAD_UNWRITTEN:
                return e->n_members > 0 ? e->members[0] : NULL;
        default:
                return NULL;
        }
}

/* ---------------------------------------------------------------------------
 * Lifetime
 * ------------------------------------------------------------------------- */

void cube_error_free(cube_error *e)
{
        if (!e)
                return;

        free(e->text);
        free(e->text2);
        for (size_t i = 0; i < e->n_chain; i++)
                free(e->chain[i]);
        free(e->chain);
        for (size_t i = 0; i < e->n_members; i++)
                cube_error_free(e->members[i]);
        free(e->members);
        free(e->rendered);
        free(e);
}

cube_error *cube__err_node_new(cube_error_kind kind)
{
        cube_error *e = calloc(1, sizeof(*e));

        if (!e)
                return NULL;
        e->kind = kind;
        return e;
}

/* strdup that maps NULL to NULL, so only a real allocation failure reads as
 * one. */
static int dup_str(const char *s, char **ret)
{
        if (!s) {
                *ret = NULL;
                return 0;
        }
        *ret = strdup(s);
        return *ret ? 0 : -ENOMEM;
}

cube_error *cube_error_clone(const cube_error *e)
{
        cube_error *c;

        if (!e)
                return NULL;

        c = cube__err_node_new(e->kind);
        if (!c)
                return NULL;

        c->a = e->a;
        c->b = e->b;
        memcpy(c->dim_requested, e->dim_requested, sizeof(c->dim_requested));
        memcpy(c->dim_max, e->dim_max, sizeof(c->dim_max));
        c->operation = e->operation;

        if (dup_str(e->text, &c->text) < 0 || dup_str(e->text2, &c->text2) < 0)
                goto fail;

        if (e->n_chain > 0) {
                c->chain = calloc(e->n_chain, sizeof(*c->chain));
                if (!c->chain)
                        goto fail;
                c->n_chain = e->n_chain;
                for (size_t i = 0; i < e->n_chain; i++)
                        if (dup_str(e->chain[i], &c->chain[i]) < 0)
                                goto fail;
        }

        if (e->n_members > 0) {
                c->members = calloc(e->n_members, sizeof(*c->members));
                if (!c->members)
                        goto fail;
                c->n_members = e->n_members;
                for (size_t i = 0; i < e->n_members; i++) {
                        c->members[i] = cube_error_clone(e->members[i]);
                        if (!c->members[i] && e->members[i])
                                goto fail;
                }
        }

        return c;

fail:
        cube_error_free(c);
        return NULL;
}

/* ---------------------------------------------------------------------------
 * Constructors
 *
 * Each refuses a kind that does not fit it the way it refuses an allocation
 * failure, with NULL, so that every tree built here encodes and decodes. A
 * source handed to one is consumed whatever happens.
 * ------------------------------------------------------------------------- */

static char *vformat(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

static char *vformat(const char *fmt, va_list ap)
{
        va_list aq;
        char *s;
        int n;

        va_copy(aq, ap);
        n = vsnprintf(NULL, 0, fmt, aq);
        va_end(aq);
        if (n < 0)
                return NULL;

        s = malloc((size_t) n + 1);
        if (!s)
                return NULL;
        vsnprintf(s, (size_t) n + 1, fmt, ap);
        return s;
}

/* Takes ownership of source: it becomes members[0], or is freed. */
int cube__err_attach(cube_error *e, cube_error *source)
{
        e->members = malloc(sizeof(*e->members));
        if (!e->members) {
                cube_error_free(source);
                return -ENOMEM;
        }
        e->members[0] = source;
        e->n_members = 1;
        return 0;
}

static bool has_payload(cube_error_kind kind, enum cube__err_payload payload)
{
        const struct cube__err_info *info = cube__err_info(kind);

        return info && info->payload == payload;
}

cube_error *cube__err_new(cube_error_kind kind)
{
        const struct cube__err_info *info = cube__err_info(kind);

        /* A variant that stands on another error has a constructor taking it. */
        if (!info || info->payload == PAYLOAD_WRAP || info->payload == PAYLOAD_MAPPING ||
            info->payload == PAYLOAD_UNWRITTEN)
                return NULL;

        return cube__err_node_new(kind);
}

static cube_error *text_new_va(cube_error_kind kind, const char *fmt, va_list ap)
        __attribute__((format(printf, 2, 0)));

static cube_error *text_new_va(cube_error_kind kind, const char *fmt, va_list ap)
{
        cube_error *e;

        if (!has_payload(kind, PAYLOAD_TEXT))
                return NULL;

        e = cube__err_node_new(kind);
        if (!e)
                return NULL;

        e->text = vformat(fmt, ap);
        if (!e->text) {
                cube_error_free(e);
                return NULL;
        }
        return e;
}

cube_error *cube__err_text(cube_error_kind kind, const char *fmt, ...)
{
        cube_error *e;
        va_list ap;

        va_start(ap, fmt);
        e = text_new_va(kind, fmt, ap);
        va_end(ap);
        return e;
}

cube_error *cube__err_wrap(cube_error_kind kind, cube_error *source)
{
        const struct cube__err_info *info = cube__err_info(kind);
        cube_error *e;

        if (!info || info->payload != PAYLOAD_WRAP || !source ||
            cube__err_family_of(source->kind) != info->inner) {
                cube_error_free(source);
                return NULL;
        }

        e = cube__err_node_new(kind);
        if (!e) {
                cube_error_free(source);
                return NULL;
        }
        if (cube__err_attach(e, source) < 0) {
                cube_error_free(e);
                return NULL;
        }
        return e;
}

cube_error *cube__err_size(cube_error_kind kind, uint64_t size)
{
        cube_error *e;

        if (!has_payload(kind, PAYLOAD_SIZE))
                return NULL;

        e = cube__err_node_new(kind);
        if (e)
                e->a = size;
        return e;
}

cube_error *cube__err_validation(const char *fmt, ...)
{
        cube_error *e;
        va_list ap;

        va_start(ap, fmt);
        e = text_new_va(CUBE_SERVER_VALIDATION, fmt, ap);
        va_end(ap);
        return e;
}

cube_error *cube__err_generic(const char *fmt, ...)
{
        cube_error *e;
        va_list ap;

        va_start(ap, fmt);
        e = text_new_va(CUBE_SERVER_GENERIC, fmt, ap);
        va_end(ap);
        return e;
}

static cube_error *pair_new(cube_error_kind kind, const char *text, const char *text2)
{
        cube_error *e = cube__err_node_new(kind);

        if (!e)
                return NULL;
        if (dup_str(text, &e->text) < 0 || dup_str(text2, &e->text2) < 0) {
                cube_error_free(e);
                return NULL;
        }
        return e;
}

cube_error *cube__err_foreign_handle(const char *handle_service, const char *client_service)
{
        return pair_new(CUBE_SERVER_FOREIGN_HANDLE, handle_service, client_service);
}

cube_error *cube__err_service_mismatch(const char *client_service, const char *requested)
{
        return pair_new(CUBE_SERVER_SERVICE_MISMATCH, client_service, requested);
}

cube_error *cube__err_expansion_panicked(const char *kernel, const char *message)
{
        return pair_new(CUBE_COMPILATION_EXPANSION_PANICKED, kernel, message);
}

cube_error *cube__err_no_device_transport(cube_collective operation)
{
        cube_error *e;

        if ((unsigned) operation >= CUBE_COLLECTIVE_MAX_)
                return NULL;

        e = cube__err_node_new(CUBE_SERVER_NO_DEVICE_TRANSPORT);
        if (e)
                e->operation = operation;
        return e;
}

cube_error *cube__err_io_size(cube_error_kind io_kind, uint64_t size)
{
        return cube__err_wrap(CUBE_SERVER_IO, cube__err_size(io_kind, size));
}

cube_error *cube__err_not_found(const char *fmt, ...)
{
        cube_error *e;
        va_list ap;

        va_start(ap, fmt);
        e = text_new_va(CUBE_IO_NOT_FOUND, fmt, ap);
        va_end(ap);
        return cube__err_wrap(CUBE_SERVER_IO, e);
}

cube_error *cube__err_poison(const char *fmt, ...)
{
        cube_error *e;
        va_list ap;

        va_start(ap, fmt);
        e = text_new_va(CUBE_DEVICE_POISON, fmt, ap);
        va_end(ap);
        return e;
}

/* Units are u32 in the reference: a larger count saturates rather than
 * producing a value the decoder would refuse. */
cube_error *cube__err_resource(cube_error_kind kind, uint64_t requested, uint64_t max)
{
        const struct cube__err_info *info = cube__err_info(kind);
        cube_error *e;

        if (!info || info->payload != PAYLOAD_LIMIT)
                return NULL;

        if (info->narrow) {
                if (requested > UINT32_MAX)
                        requested = UINT32_MAX;
                if (max > UINT32_MAX)
                        max = UINT32_MAX;
        }

        e = cube__err_node_new(kind);
        if (!e)
                return NULL;
        e->a = requested;
        e->b = max;
        return e;
}

cube_error *cube__err_cube_dim(const uint32_t requested[3], const uint32_t max[3])
{
        cube_error *e;

        if (!requested || !max)
                return NULL;

        e = cube__err_node_new(CUBE_RESOURCE_CUBE_DIM);
        if (!e)
                return NULL;
        memcpy(e->dim_requested, requested, sizeof(e->dim_requested));
        memcpy(e->dim_max, max, sizeof(e->dim_max));
        return e;
}

cube_error *cube__err_storage_mapping_failed(uint64_t size, cube_error *io_source)
{
        cube_error *e;

        if (!io_source || cube__err_family_of(io_source->kind) != CUBE__FAMILY_IO) {
                cube_error_free(io_source);
                return NULL;
        }

        e = cube__err_node_new(CUBE_IO_STORAGE_MAPPING_FAILED);
        if (!e) {
                cube_error_free(io_source);
                return NULL;
        }
        e->a = size;
        if (cube__err_attach(e, io_source) < 0) {
                cube_error_free(e);
                return NULL;
        }
        return e;
}

cube_error *cube__err_unwritten(uint64_t failure, uint32_t claimed, char **chain, size_t n_chain,
                                cube_error *root)
{
        cube_error *e = NULL;

        if (!root || cube__err_family_of(root->kind) != CUBE__FAMILY_SERVER ||
            (!chain && n_chain > 0))
                goto fail;

        e = cube__err_node_new(CUBE_SERVER_UNWRITTEN);
        if (!e)
                goto fail;

        e->a = failure;
        e->b = claimed;
        if (n_chain > 0) {
                e->chain = chain;
                e->n_chain = n_chain;
        } else
                free(chain);

        if (cube__err_attach(e, root) < 0) {
                cube_error_free(e);
                return NULL;
        }
        return e;

fail:
        for (size_t i = 0; chain && i < n_chain; i++)
                free(chain[i]);
        free(chain);
        cube_error_free(root);
        return NULL;
}

cube_error *cube__err_several(void)
{
        return cube__err_node_new(CUBE_SERVER_SEVERAL);
}

/* Consumes member whatever happens. A NULL member is a constructor that ran
 * out of memory, and reads as such. */
int cube__err_several_add(cube_error *several, cube_error *member)
{
        cube_error **members;

        if (!member)
                return -ENOMEM;

        if (!several || several->kind != CUBE_SERVER_SEVERAL ||
            cube__err_family_of(member->kind) != CUBE__FAMILY_SERVER) {
                cube_error_free(member);
                return -EINVAL;
        }

        members = realloc(several->members, (several->n_members + 1) * sizeof(*members));
        if (!members) {
                cube_error_free(member);
                return -ENOMEM;
        }
        members[several->n_members] = member;
        several->members = members;
        several->n_members++;

        /* The group's report grew, so a rendered one no longer says it all. */
        free(several->rendered);
        several->rendered = NULL;
        return 0;
}

/* ---------------------------------------------------------------------------
 * Accessors
 * ------------------------------------------------------------------------- */

cube_error_kind cube_error_kind_of(const cube_error *e)
{
        return e ? e->kind : 0;
}

const char *cube_error_variant(const cube_error *e)
{
        const struct cube__err_info *info = e ? cube__err_info(e->kind) : NULL;

        return info ? info->name : NULL;
}

const char *cube_error_family(const cube_error *e)
{
        const struct cube__err_info *info = e ? cube__err_info(e->kind) : NULL;

        return info ? family_names[info->family] : NULL;
}

const char *cube_error_reason(const cube_error *e)
{
        return cube__err_payload(e) == PAYLOAD_TEXT ? e->text : NULL;
}

const char *cube_error_kernel(const cube_error *e)
{
        return e && e->kind == CUBE_COMPILATION_EXPANSION_PANICKED ? e->text : NULL;
}

const char *cube_error_panic_message(const cube_error *e)
{
        return e && e->kind == CUBE_COMPILATION_EXPANSION_PANICKED ? e->text2 : NULL;
}

const char *cube_error_handle_service(const cube_error *e)
{
        return e && e->kind == CUBE_SERVER_FOREIGN_HANDLE ? e->text : NULL;
}

const char *cube_error_client_service(const cube_error *e)
{
        if (!e)
                return NULL;
        if (e->kind == CUBE_SERVER_FOREIGN_HANDLE)
                return e->text2;
        if (e->kind == CUBE_SERVER_SERVICE_MISMATCH)
                return e->text;
        return NULL;
}

const char *cube_error_requested_service(const cube_error *e)
{
        return e && e->kind == CUBE_SERVER_SERVICE_MISMATCH ? e->text2 : NULL;
}

uint64_t cube_error_size(const cube_error *e)
{
        enum cube__err_payload p = cube__err_payload(e);

        return p == PAYLOAD_SIZE || p == PAYLOAD_MAPPING ? e->a : 0;
}

uint64_t cube_error_requested(const cube_error *e)
{
        return cube__err_payload(e) == PAYLOAD_LIMIT ? e->a : 0;
}

uint64_t cube_error_max(const cube_error *e)
{
        return cube__err_payload(e) == PAYLOAD_LIMIT ? e->b : 0;
}

bool cube_error_requested_dim(const cube_error *e, uint32_t ret_dim[3])
{
        if (cube__err_payload(e) != PAYLOAD_DIM)
                return false;
        memcpy(ret_dim, e->dim_requested, sizeof(e->dim_requested));
        return true;
}

bool cube_error_max_dim(const cube_error *e, uint32_t ret_dim[3])
{
        if (cube__err_payload(e) != PAYLOAD_DIM)
                return false;
        memcpy(ret_dim, e->dim_max, sizeof(e->dim_max));
        return true;
}

int cube_error_operation(const cube_error *e)
{
        return cube__err_payload(e) == PAYLOAD_OPERATION ? e->operation : -1;
}

uint64_t cube_error_failure(const cube_error *e)
{
        return cube__err_payload(e) == PAYLOAD_UNWRITTEN ? e->a : 0;
}

uint32_t cube_error_claimed(const cube_error *e)
{
        return cube__err_payload(e) == PAYLOAD_UNWRITTEN ? (uint32_t) e->b : 0;
}

size_t cube_error_chain_len(const cube_error *e)
{
        return cube__err_payload(e) == PAYLOAD_UNWRITTEN ? e->n_chain : 0;
}

const char *cube_error_chain_at(const cube_error *e, size_t i)
{
        if (cube__err_payload(e) != PAYLOAD_UNWRITTEN || i >= e->n_chain)
                return NULL;
        return e->chain[i];
}

const cube_error *cube_error_source(const cube_error *e)
{
        return cube__err_source(e);
}

const cube_error *cube_error_root(const cube_error *e)
{
        for (;;) {
                const cube_error *next = cube__err_source(e);
                if (!next && cube__err_payload(e) == PAYLOAD_SEVERAL && e->n_members == 1)
                        next = e->members[0];
                if (!next)
                        return e;
                e = next;
        }
}

size_t cube_error_count(const cube_error *e)
{
        return cube__err_payload(e) == PAYLOAD_SEVERAL ? e->n_members : 0;
}

const cube_error *cube_error_at(const cube_error *e, size_t i)
{
        if (cube__err_payload(e) != PAYLOAD_SEVERAL || i >= e->n_members)
                return NULL;
        return e->members[i];
}

/* ---------------------------------------------------------------------------
 * Predicates
 *
 * One function per question covers every family: kinds are distinct across
 * enums, so each case below is the reference's match arm for its own enum.
 * ------------------------------------------------------------------------- */

bool cube_error_is_refusal(const cube_error *e)
{
        if (!e)
                return false;

        switch (e->kind) {
        case CUBE_SERVER_LAUNCH:
        case CUBE_SERVER_UNWRITTEN:
        case CUBE_LAUNCH_COMPILATION_ERROR:
                return cube_error_is_refusal(cube__err_source(e));

        case CUBE_SERVER_SEVERAL:
                /* Every root must refuse, and an empty group refuses nothing. */
                if (e->n_members == 0)
                        return false;
                for (size_t i = 0; i < e->n_members; i++)
                        if (!cube_error_is_refusal(e->members[i]))
                                return false;
                return true;

        case CUBE_LAUNCH_TOO_MANY_RESOURCES:
        case CUBE_COMPILATION_UNSUPPORTED_INSTRUCTION:
        case CUBE_COMPILATION_GENERIC:
        case CUBE_COMPILATION_VALIDATION:
                return true;

        default:
                return false;
        }
}

bool cube_error_is_device_poisoned(const cube_error *e)
{
        if (!e)
                return false;

        switch (e->kind) {
        case CUBE_SERVER_DEVICE_POISONED:
        case CUBE_LAUNCH_DEVICE_POISONED:
        case CUBE_COMPILATION_DEVICE_POISONED:
        case CUBE_IO_DEVICE_POISONED:
        case CUBE_DEVICE_POISON:
                return true;

        case CUBE_SERVER_LAUNCH:
        case CUBE_SERVER_IO:
        case CUBE_SERVER_UNWRITTEN:
        case CUBE_LAUNCH_COMPILATION_ERROR:
        case CUBE_IO_STORAGE_MAPPING_FAILED:
        case CUBE_PROFILE_LAUNCH:
        case CUBE_PROFILE_SERVER:
                return cube_error_is_device_poisoned(cube__err_source(e));

        case CUBE_SERVER_SEVERAL:
                /* One poisoned root is enough: nothing on the device can be trusted. */
                for (size_t i = 0; i < e->n_members; i++)
                        if (cube_error_is_device_poisoned(e->members[i]))
                                return true;
                return false;

        default:
                return false;
        }
}

bool cube_error_may_succeed_after_reclaim(const cube_error *e)
{
        if (!e)
                return false;

        if (e->kind == CUBE_SERVER_IO)
                return cube_error_may_succeed_after_reclaim(cube__err_source(e));

        if (cube__err_family_of(e->kind) != CUBE__FAMILY_IO)
                return false;

        return e->kind != CUBE_IO_BUFFER_TOO_BIG && e->kind != CUBE_IO_PAGE_UPDATE_FORBIDDEN;
}

/* ---------------------------------------------------------------------------
 * Messages
 *
 * The reference's Display text with every backtrace left out: a backtrace
 * belongs to the process that captured it, and none crosses the socket.
 * ------------------------------------------------------------------------- */

struct text {
        char *p;
        size_t len, cap;
        bool failed;
};

static void text_put(struct text *t, const char *s, size_t n)
{
        if (t->failed)
                return;

        if (t->len + n + 1 > t->cap) {
                size_t cap = t->cap ? t->cap : 128;
                char *p;

                while (cap < t->len + n + 1)
                        cap *= 2;
                p = realloc(t->p, cap);
                if (!p) {
                        t->failed = true;
                        return;
                }
                t->p = p;
                t->cap = cap;
        }

        memcpy(t->p + t->len, s, n);
        t->len += n;
        t->p[t->len] = '\0';
}

static void text_puts(struct text *t, const char *s)
{
        if (s)
                text_put(t, s, strlen(s));
}

static void text_u64(struct text *t, uint64_t v)
{
        char buf[24];
        int n = snprintf(buf, sizeof(buf), "%" PRIu64, v);

        text_put(t, buf, (size_t) n);
}

/* A (u32, u32, u32) as Rust's Debug prints a tuple. */
static void text_dim(struct text *t, const uint32_t d[3])
{
        char buf[48];
        int n = snprintf(buf, sizeof(buf), "(%" PRIu32 ", %" PRIu32 ", %" PRIu32 ")",
                         d[0], d[1], d[2]);

        text_put(t, buf, (size_t) n);
}

static void render(const cube_error *e, struct text *t)
{
        const struct cube__err_info *info = e ? cube__err_info(e->kind) : NULL;

        if (!info) {
                text_puts(t, "An error of an unknown kind");
                return;
        }

        text_puts(t, info->lead);

        switch (info->payload) {
        case PAYLOAD_UNIT:
                break;
        case PAYLOAD_WRAP:
                render(cube__err_source(e), t);
                break;
        case PAYLOAD_TEXT:
                text_puts(t, e->text);
                break;
        case PAYLOAD_TEXT_PAIR:
                text_puts(t, e->text);
                text_puts(t, info->mid);
                text_puts(t, e->text2);
                break;
        case PAYLOAD_SIZE:
                text_u64(t, e->a);
                break;
        case PAYLOAD_LIMIT:
                text_u64(t, e->a);
                text_puts(t, info->mid);
                text_u64(t, e->b);
                break;
        case PAYLOAD_DIM:
                text_dim(t, e->dim_requested);
                text_puts(t, info->mid);
                text_dim(t, e->dim_max);
                break;
        case PAYLOAD_OPERATION:
                if (e->operation >= 0 && e->operation < CUBE_COLLECTIVE_MAX_)
                        text_puts(t, cube__err_collective_names[e->operation]);
                break;
        case PAYLOAD_MAPPING:
                text_u64(t, e->a);
                text_puts(t, info->mid);
                render(cube__err_source(e), t);
                break;
        case PAYLOAD_UNWRITTEN:
                text_u64(t, e->a);
                text_puts(t, info->mid);
                text_u64(t, e->b);
                text_puts(t, info->tail);
                for (size_t i = 0; i < e->n_chain; i++) {
                        text_puts(t, "  ");
                        text_puts(t, e->chain[i]);
                        text_puts(t, "\n");
                }
                text_puts(t, "Caused by:\n  ");
                render(cube__err_source(e), t);
                return;
        case PAYLOAD_SEVERAL:
                for (size_t i = 0; i < e->n_members; i++) {
                        if (i > 0)
                                text_puts(t, "\n");
                        render(e->members[i], t);
                }
                break;
        }

        text_puts(t, info->tail);
}

/* Renders once and caches the text on the node. Two threads racing here both
 * render; one text wins and the other is dropped, so the call stays safe on a
 * shared error. */
const char *cube_error_message(const cube_error *e)
{
        cube_error *m = (cube_error *) e;
        struct text t = { .p = NULL };
        char *expected = NULL;
        char *cached;

        if (!e)
                return NULL;

        cached = __atomic_load_n(&m->rendered, __ATOMIC_ACQUIRE);
        if (cached)
                return cached;

        render(e, &t);
        text_put(&t, "", 0);
        if (t.failed) {
                free(t.p);
                return "Out of memory while describing an error";
        }

        if (!__atomic_compare_exchange_n(&m->rendered, &expected, t.p, false,
                                         __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                free(t.p);
                return expected;
        }
        return t.p;
}

/* ---------------------------------------------------------------------------
 * Equality
 * ------------------------------------------------------------------------- */

static bool str_equal(const char *a, const char *b)
{
        if (!a || !b)
                return a == b;
        return strcmp(a, b) == 0;
}

bool cube__err_equal(const cube_error *a, const cube_error *b)
{
        if (a == b)
                return true;
        if (!a || !b)
                return false;

        if (a->kind != b->kind ||
            !str_equal(a->text, b->text) || !str_equal(a->text2, b->text2) ||
            a->a != b->a || a->b != b->b ||
            memcmp(a->dim_requested, b->dim_requested, sizeof(a->dim_requested)) != 0 ||
            memcmp(a->dim_max, b->dim_max, sizeof(a->dim_max)) != 0 ||
            a->operation != b->operation ||
            a->n_chain != b->n_chain || a->n_members != b->n_members)
                return false;

        for (size_t i = 0; i < a->n_chain; i++)
                if (!str_equal(a->chain[i], b->chain[i]))
                        return false;

        for (size_t i = 0; i < a->n_members; i++)
                if (!cube__err_equal(a->members[i], b->members[i]))
                        return false;

        return true;
}
