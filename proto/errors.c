/*
 * errors.c - the error taxonomy: building cube_error trees, what they say,
 * the predicates callers branch on, and their msgpack encoding.
 *
 * The tree mirrors the reference's enums (ServerError, LaunchError,
 * CompilationError, ResourceLimitError, IoError, ProfileError, DevicePoison)
 * variant for variant, so that both ends of the socket answer is_refusal and
 * is_device_poisoned exactly as the reference does, from the structure and
 * never from the message. Everything that differs per variant (its name, its
 * family, the shape of its payload, the words around its fields) lives in one
 * table indexed by kind.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "wire.h"

/* Error levels a decoded tree may nest, the top level included. */
#define CUBE_ERR_MAX_DEPTH 64

/* What a variant carries, which is also how its payload is encoded. */
enum payload {
        PAYLOAD_UNIT,           /* nil */
        PAYLOAD_WRAP,           /* the wrapped value itself, in members[0] */
        PAYLOAD_TEXT,           /* {key: text} */
        PAYLOAD_TEXT_PAIR,      /* {key: text, key2: text2} */
        PAYLOAD_SIZE,           /* {size: a} */
        PAYLOAD_LIMIT,          /* {requested: a, max: b} */
        PAYLOAD_DIM,            /* {requested: [3], max: [3]} */
        PAYLOAD_OPERATION,      /* {operation: name} */
        PAYLOAD_MAPPING,        /* {size: a, source: members[0]} */
        PAYLOAD_UNWRITTEN,      /* {failure: a, claimed: b, chain, root: members[0]} */
        PAYLOAD_SEVERAL,        /* {errors: members} */
};

struct kind_info {
        const char *name;               /* the reference's variant name */
        cube__err_family family;
        enum payload payload;
        cube__err_family inner;         /* family of the source, root or members */
        const char *key, *key2;         /* map keys of the text fields */
        bool narrow;                    /* LIMIT: the fields are u32 in the reference */
        const char *lead, *mid, *tail;  /* the message around the fields */
};

#define F(x) CUBE__FAMILY_##x

static const struct kind_info kind_table[CUBE_DEVICE_POISON + 1] = {
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
static const char *const collective_names[CUBE_COLLECTIVE_MAX_] = {
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

static const struct kind_info *kind_info(cube_error_kind kind)
{
        if ((unsigned) kind >= sizeof(kind_table) / sizeof(kind_table[0]))
                return NULL;
        if (!kind_table[kind].name)
                return NULL;
        return &kind_table[kind];
}

static enum payload payload_of(const cube_error *e)
{
        const struct kind_info *info = e ? kind_info(e->kind) : NULL;

        return info ? info->payload : PAYLOAD_UNIT;
}

cube__err_family cube__err_family_of(cube_error_kind kind)
{
        const struct kind_info *info = kind_info(kind);

        return info ? info->family : CUBE__FAMILY_INVALID;
}

/* The single error a wrapping variant, StorageMappingFailed or Unwritten
 * stands on; NULL for every other kind. */
static const cube_error *source_of(const cube_error *e)
{
        switch (payload_of(e)) {
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

static cube_error *node_new(cube_error_kind kind)
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

        c = node_new(e->kind);
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
static int attach_source(cube_error *e, cube_error *source)
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

static bool has_payload(cube_error_kind kind, enum payload payload)
{
        const struct kind_info *info = kind_info(kind);

        return info && info->payload == payload;
}

cube_error *cube__err_new(cube_error_kind kind)
{
        const struct kind_info *info = kind_info(kind);

        /* A variant that stands on another error has a constructor taking it. */
        if (!info || info->payload == PAYLOAD_WRAP || info->payload == PAYLOAD_MAPPING ||
            info->payload == PAYLOAD_UNWRITTEN)
                return NULL;

        return node_new(kind);
}

static cube_error *text_new_va(cube_error_kind kind, const char *fmt, va_list ap)
        __attribute__((format(printf, 2, 0)));

static cube_error *text_new_va(cube_error_kind kind, const char *fmt, va_list ap)
{
        cube_error *e;

        if (!has_payload(kind, PAYLOAD_TEXT))
                return NULL;

        e = node_new(kind);
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
        const struct kind_info *info = kind_info(kind);
        cube_error *e;

        if (!info || info->payload != PAYLOAD_WRAP || !source ||
            cube__err_family_of(source->kind) != info->inner) {
                cube_error_free(source);
                return NULL;
        }

        e = node_new(kind);
        if (!e) {
                cube_error_free(source);
                return NULL;
        }
        if (attach_source(e, source) < 0) {
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

        e = node_new(kind);
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
        cube_error *e = node_new(kind);

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

        e = node_new(CUBE_SERVER_NO_DEVICE_TRANSPORT);
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
        const struct kind_info *info = kind_info(kind);
        cube_error *e;

        if (!info || info->payload != PAYLOAD_LIMIT)
                return NULL;

        if (info->narrow) {
                if (requested > UINT32_MAX)
                        requested = UINT32_MAX;
                if (max > UINT32_MAX)
                        max = UINT32_MAX;
        }

        e = node_new(kind);
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

        e = node_new(CUBE_RESOURCE_CUBE_DIM);
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

        e = node_new(CUBE_IO_STORAGE_MAPPING_FAILED);
        if (!e) {
                cube_error_free(io_source);
                return NULL;
        }
        e->a = size;
        if (attach_source(e, io_source) < 0) {
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

        e = node_new(CUBE_SERVER_UNWRITTEN);
        if (!e)
                goto fail;

        e->a = failure;
        e->b = claimed;
        if (n_chain > 0) {
                e->chain = chain;
                e->n_chain = n_chain;
        } else
                free(chain);

        if (attach_source(e, root) < 0) {
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
        return node_new(CUBE_SERVER_SEVERAL);
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
        const struct kind_info *info = e ? kind_info(e->kind) : NULL;

        return info ? info->name : NULL;
}

const char *cube_error_family(const cube_error *e)
{
        const struct kind_info *info = e ? kind_info(e->kind) : NULL;

        return info ? family_names[info->family] : NULL;
}

const char *cube_error_reason(const cube_error *e)
{
        return payload_of(e) == PAYLOAD_TEXT ? e->text : NULL;
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
        enum payload p = payload_of(e);

        return p == PAYLOAD_SIZE || p == PAYLOAD_MAPPING ? e->a : 0;
}

uint64_t cube_error_requested(const cube_error *e)
{
        return payload_of(e) == PAYLOAD_LIMIT ? e->a : 0;
}

uint64_t cube_error_max(const cube_error *e)
{
        return payload_of(e) == PAYLOAD_LIMIT ? e->b : 0;
}

bool cube_error_requested_dim(const cube_error *e, uint32_t ret_dim[3])
{
        if (payload_of(e) != PAYLOAD_DIM)
                return false;
        memcpy(ret_dim, e->dim_requested, sizeof(e->dim_requested));
        return true;
}

bool cube_error_max_dim(const cube_error *e, uint32_t ret_dim[3])
{
        if (payload_of(e) != PAYLOAD_DIM)
                return false;
        memcpy(ret_dim, e->dim_max, sizeof(e->dim_max));
        return true;
}

int cube_error_operation(const cube_error *e)
{
        return payload_of(e) == PAYLOAD_OPERATION ? e->operation : -1;
}

uint64_t cube_error_failure(const cube_error *e)
{
        return payload_of(e) == PAYLOAD_UNWRITTEN ? e->a : 0;
}

uint32_t cube_error_claimed(const cube_error *e)
{
        return payload_of(e) == PAYLOAD_UNWRITTEN ? (uint32_t) e->b : 0;
}

size_t cube_error_chain_len(const cube_error *e)
{
        return payload_of(e) == PAYLOAD_UNWRITTEN ? e->n_chain : 0;
}

const char *cube_error_chain_at(const cube_error *e, size_t i)
{
        if (payload_of(e) != PAYLOAD_UNWRITTEN || i >= e->n_chain)
                return NULL;
        return e->chain[i];
}

const cube_error *cube_error_source(const cube_error *e)
{
        return source_of(e);
}

const cube_error *cube_error_root(const cube_error *e)
{
        for (;;) {
                const cube_error *next = source_of(e);
                if (!next && payload_of(e) == PAYLOAD_SEVERAL && e->n_members == 1)
                        next = e->members[0];
                if (!next)
                        return e;
                e = next;
        }
}

size_t cube_error_count(const cube_error *e)
{
        return payload_of(e) == PAYLOAD_SEVERAL ? e->n_members : 0;
}

const cube_error *cube_error_at(const cube_error *e, size_t i)
{
        if (payload_of(e) != PAYLOAD_SEVERAL || i >= e->n_members)
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
                return cube_error_is_refusal(source_of(e));

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
                return cube_error_is_device_poisoned(source_of(e));

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
                return cube_error_may_succeed_after_reclaim(source_of(e));

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
        const struct kind_info *info = e ? kind_info(e->kind) : NULL;

        if (!info) {
                text_puts(t, "An error of an unknown kind");
                return;
        }

        text_puts(t, info->lead);

        switch (info->payload) {
        case PAYLOAD_UNIT:
                break;
        case PAYLOAD_WRAP:
                render(source_of(e), t);
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
                        text_puts(t, collective_names[e->operation]);
                break;
        case PAYLOAD_MAPPING:
                text_u64(t, e->a);
                text_puts(t, info->mid);
                render(source_of(e), t);
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
                render(source_of(e), t);
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

/* ---------------------------------------------------------------------------
 * Encoding: [variant, payload]
 * ------------------------------------------------------------------------- */

static int pack_str(msgpack_packer *pk, const char *s)
{
        size_t n = s ? strlen(s) : 0;

        if (msgpack_pack_str(pk, n) != 0)
                return -ENOMEM;
        if (msgpack_pack_str_body(pk, s ? s : "", n) != 0)
                return -ENOMEM;
        return 0;
}

static int pack_key_str(msgpack_packer *pk, const char *key, const char *s)
{
        int r = pack_str(pk, key);

        return r < 0 ? r : pack_str(pk, s);
}

static int pack_key_u64(msgpack_packer *pk, const char *key, uint64_t v)
{
        int r = pack_str(pk, key);

        if (r < 0)
                return r;
        return msgpack_pack_uint64(pk, v) != 0 ? -ENOMEM : 0;
}

static int pack_key_dim(msgpack_packer *pk, const char *key, const uint32_t d[3])
{
        int r = pack_str(pk, key);

        if (r < 0)
                return r;
        if (msgpack_pack_array(pk, 3) != 0)
                return -ENOMEM;
        for (size_t i = 0; i < 3; i++)
                if (msgpack_pack_uint32(pk, d[i]) != 0)
                        return -ENOMEM;
        return 0;
}

static int pack_value(msgpack_packer *pk, const cube_error *e);

static int pack_key_value(msgpack_packer *pk, const char *key, const cube_error *e)
{
        int r = pack_str(pk, key);

        return r < 0 ? r : pack_value(pk, e);
}

/* Encodes one node and what hangs under it. A node missing what its kind
 * requires (only reachable by building one by hand) is refused with -EINVAL
 * rather than sent as something the other side would reject. */
static int pack_value(msgpack_packer *pk, const cube_error *e)
{
        const struct kind_info *info = e ? kind_info(e->kind) : NULL;
        const cube_error *source;
        int r;

        if (!info)
                return -EINVAL;

        source = source_of(e);
        switch (info->payload) {
        case PAYLOAD_WRAP:
        case PAYLOAD_MAPPING:
        case PAYLOAD_UNWRITTEN:
                if (!source)
                        return -EINVAL;
                break;
        case PAYLOAD_OPERATION:
                if (e->operation < 0 || e->operation >= CUBE_COLLECTIVE_MAX_)
                        return -EINVAL;
                break;
        default:
                break;
        }

        if (msgpack_pack_array(pk, 2) != 0)
                return -ENOMEM;
        r = pack_str(pk, info->name);
        if (r < 0)
                return r;

        switch (info->payload) {
        case PAYLOAD_UNIT:
                return msgpack_pack_nil(pk) != 0 ? -ENOMEM : 0;

        case PAYLOAD_WRAP:
                return pack_value(pk, source);

        case PAYLOAD_TEXT:
                if (msgpack_pack_map(pk, 1) != 0)
                        return -ENOMEM;
                return pack_key_str(pk, info->key, e->text);

        case PAYLOAD_TEXT_PAIR:
                if (msgpack_pack_map(pk, 2) != 0)
                        return -ENOMEM;
                r = pack_key_str(pk, info->key, e->text);
                if (r < 0)
                        return r;
                return pack_key_str(pk, info->key2, e->text2);

        case PAYLOAD_SIZE:
                if (msgpack_pack_map(pk, 1) != 0)
                        return -ENOMEM;
                return pack_key_u64(pk, "size", e->a);

        case PAYLOAD_LIMIT:
                if (msgpack_pack_map(pk, 2) != 0)
                        return -ENOMEM;
                r = pack_key_u64(pk, "requested", e->a);
                if (r < 0)
                        return r;
                return pack_key_u64(pk, "max", e->b);

        case PAYLOAD_DIM:
                if (msgpack_pack_map(pk, 2) != 0)
                        return -ENOMEM;
                r = pack_key_dim(pk, "requested", e->dim_requested);
                if (r < 0)
                        return r;
                return pack_key_dim(pk, "max", e->dim_max);

        case PAYLOAD_OPERATION:
                if (msgpack_pack_map(pk, 1) != 0)
                        return -ENOMEM;
                return pack_key_str(pk, "operation", collective_names[e->operation]);

        case PAYLOAD_MAPPING:
                if (msgpack_pack_map(pk, 2) != 0)
                        return -ENOMEM;
                r = pack_key_u64(pk, "size", e->a);
                if (r < 0)
                        return r;
                return pack_key_value(pk, "source", source);

        case PAYLOAD_UNWRITTEN:
                if (msgpack_pack_map(pk, 4) != 0)
                        return -ENOMEM;
                r = pack_key_u64(pk, "failure", e->a);
                if (r < 0)
                        return r;
                r = pack_key_u64(pk, "claimed", e->b);
                if (r < 0)
                        return r;
                r = pack_str(pk, "chain");
                if (r < 0)
                        return r;
                if (msgpack_pack_array(pk, e->n_chain) != 0)
                        return -ENOMEM;
                for (size_t i = 0; i < e->n_chain; i++) {
                        r = pack_str(pk, e->chain[i]);
                        if (r < 0)
                                return r;
                }
                return pack_key_value(pk, "root", source);

        case PAYLOAD_SEVERAL:
                if (msgpack_pack_map(pk, 1) != 0)
                        return -ENOMEM;
                r = pack_str(pk, "errors");
                if (r < 0)
                        return r;
                if (msgpack_pack_array(pk, e->n_members) != 0)
                        return -ENOMEM;
                for (size_t i = 0; i < e->n_members; i++) {
                        r = pack_value(pk, e->members[i]);
                        if (r < 0)
                                return r;
                }
                return 0;
        }

        return -EINVAL;
}

int cube__err_pack(msgpack_packer *pk, const cube_error *e)
{
        return pack_value(pk, e);
}

/* ---------------------------------------------------------------------------
 * Decoding
 *
 * Every check answers -EBADMSG; only a failed allocation answers -ENOMEM. A
 * half-built node is freed on the way out, so nothing leaks on any path.
 * ------------------------------------------------------------------------- */

static int unpack_value(const msgpack_object *o, cube__err_family family, unsigned depth,
                        cube_error **ret);

static const struct kind_info *kind_by_name(cube__err_family family, const char *name, size_t n,
                                            cube_error_kind *ret_kind) {
        for (size_t k = 0; k < sizeof(kind_table) / sizeof(kind_table[0]); k++) {
                const struct kind_info *info = &kind_table[k];

                if (!info->name || info->family != family)
                        continue;
                if (strlen(info->name) == n && memcmp(info->name, name, n) == 0) {
                        *ret_kind = (cube_error_kind) k;
                        return info;
                }
        }
        return NULL;
}

/* msgpack strings are counted, not terminated. One holding a NUL cannot
 * become a C string without changing what it says, so it is refused. */
static int obj_str(const msgpack_object *o, char **ret)
{
        char *s;

        if (!o || o->type != MSGPACK_OBJECT_STR)
                return -EBADMSG;
        if (memchr(o->via.str.ptr, '\0', o->via.str.size))
                return -EBADMSG;

        s = malloc((size_t) o->via.str.size + 1);
        if (!s)
                return -ENOMEM;
        memcpy(s, o->via.str.ptr, o->via.str.size);
        s[o->via.str.size] = '\0';
        *ret = s;
        return 0;
}

static int obj_uint(const msgpack_object *o, uint64_t max, uint64_t *ret)
{
        uint64_t v;

        if (!o)
                return -EBADMSG;

        if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                v = o->via.u64;
        else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && o->via.i64 >= 0)
                v = (uint64_t) o->via.i64;
        else
                return -EBADMSG;

        if (v > max)
                return -EBADMSG;
        *ret = v;
        return 0;
}

static int obj_dim(const msgpack_object *o, uint32_t ret[3])
{
        uint64_t v;
        int r;

        if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
                return -EBADMSG;

        for (size_t i = 0; i < 3; i++) {
                r = obj_uint(&o->via.array.ptr[i], UINT32_MAX, &v);
                if (r < 0)
                        return r;
                ret[i] = (uint32_t) v;
        }
        return 0;
}

static int obj_operation(const msgpack_object *o, int *ret)
{
        if (!o || o->type != MSGPACK_OBJECT_STR)
                return -EBADMSG;

        for (int i = 0; i < CUBE_COLLECTIVE_MAX_; i++) {
                const char *name = collective_names[i];

                if (strlen(name) == o->via.str.size &&
                    memcmp(name, o->via.str.ptr, o->via.str.size) == 0) {
                        *ret = i;
                        return 0;
                }
        }
        return -EBADMSG;
}

/* Decodes the one error a wrapping variant, StorageMappingFailed or
 * Unwritten stands on, into members[0]. */
static int unpack_source(cube_error *e, const msgpack_object *o, cube__err_family family,
                         unsigned depth)
{
        cube_error *source = NULL;
        int r;

        if (!o)
                return -EBADMSG;

        r = unpack_value(o, family, depth + 1, &source);
        if (r < 0)
                return r;
        return attach_source(e, source);
}

static int unpack_chain(cube_error *e, const msgpack_object *o)
{
        int r;

        if (!o || o->type != MSGPACK_OBJECT_ARRAY)
                return -EBADMSG;
        if (o->via.array.size == 0)
                return 0;

        e->chain = calloc(o->via.array.size, sizeof(*e->chain));
        if (!e->chain)
                return -ENOMEM;
        e->n_chain = o->via.array.size;

        for (uint32_t i = 0; i < o->via.array.size; i++) {
                r = obj_str(&o->via.array.ptr[i], &e->chain[i]);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int unpack_members(cube_error *e, const msgpack_object *o, unsigned depth)
{
        int r;

        if (!o || o->type != MSGPACK_OBJECT_ARRAY)
                return -EBADMSG;
        if (o->via.array.size == 0)
                return 0;

        e->members = calloc(o->via.array.size, sizeof(*e->members));
        if (!e->members)
                return -ENOMEM;
        e->n_members = o->via.array.size;

        for (uint32_t i = 0; i < o->via.array.size; i++) {
                r = unpack_value(&o->via.array.ptr[i], CUBE__FAMILY_SERVER, depth + 1,
                                 &e->members[i]);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Fills e's fields from its payload p. On failure e may hold part of them;
 * the caller frees it whole. */
static int unpack_payload(cube_error *e, const struct kind_info *info, const msgpack_object *p,
                          unsigned depth)
{
        uint64_t v;
        int r;

        if (info->payload == PAYLOAD_UNIT)
                return p->type == MSGPACK_OBJECT_NIL ? 0 : -EBADMSG;

        if (info->payload == PAYLOAD_WRAP)
                return unpack_source(e, p, info->inner, depth);

        if (p->type != MSGPACK_OBJECT_MAP)
                return -EBADMSG;

        switch (info->payload) {
        case PAYLOAD_TEXT:
                return obj_str(cube__map_get(p, info->key), &e->text);

        case PAYLOAD_TEXT_PAIR:
                r = obj_str(cube__map_get(p, info->key), &e->text);
                if (r < 0)
                        return r;
                return obj_str(cube__map_get(p, info->key2), &e->text2);

        case PAYLOAD_SIZE:
                return obj_uint(cube__map_get(p, "size"), UINT64_MAX, &e->a);

        case PAYLOAD_LIMIT:
                v = info->narrow ? UINT32_MAX : UINT64_MAX;
                r = obj_uint(cube__map_get(p, "requested"), v, &e->a);
                if (r < 0)
                        return r;
                return obj_uint(cube__map_get(p, "max"), v, &e->b);

        case PAYLOAD_DIM:
                r = obj_dim(cube__map_get(p, "requested"), e->dim_requested);
                if (r < 0)
                        return r;
                return obj_dim(cube__map_get(p, "max"), e->dim_max);

        case PAYLOAD_OPERATION:
                return obj_operation(cube__map_get(p, "operation"), &e->operation);

        case PAYLOAD_MAPPING:
                r = obj_uint(cube__map_get(p, "size"), UINT64_MAX, &e->a);
                if (r < 0)
                        return r;
                return unpack_source(e, cube__map_get(p, "source"), info->inner, depth);

        case PAYLOAD_UNWRITTEN:
                r = obj_uint(cube__map_get(p, "failure"), UINT64_MAX, &e->a);
                if (r < 0)
                        return r;
                r = obj_uint(cube__map_get(p, "claimed"), UINT32_MAX, &e->b);
                if (r < 0)
                        return r;
                r = unpack_chain(e, cube__map_get(p, "chain"));
                if (r < 0)
                        return r;
                return unpack_source(e, cube__map_get(p, "root"), info->inner, depth);

        case PAYLOAD_SEVERAL:
                return unpack_members(e, cube__map_get(p, "errors"), depth);

        default:
                return -EBADMSG;
        }
}

/* depth counts error levels, the top one being 1. */
static int unpack_value(const msgpack_object *o, cube__err_family family, unsigned depth,
                        cube_error **ret)
{
        const struct kind_info *info;
        const msgpack_object *name;
        cube_error_kind kind;
        cube_error *e;
        int r;

        if (depth > CUBE_ERR_MAX_DEPTH)
                return -EBADMSG;

        if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2)
                return -EBADMSG;

        name = &o->via.array.ptr[0];
        if (name->type != MSGPACK_OBJECT_STR)
                return -EBADMSG;

        info = kind_by_name(family, name->via.str.ptr, name->via.str.size, &kind);
        if (!info)
                return -EBADMSG;

        e = node_new(kind);
        if (!e)
                return -ENOMEM;

        r = unpack_payload(e, info, &o->via.array.ptr[1], depth);
        if (r < 0) {
                cube_error_free(e);
                return r;
        }

        *ret = e;
        return 0;
}

int cube__err_unpack(const msgpack_object *o, cube__err_family family, cube_error **ret_error)
{
        if (!ret_error || (unsigned) family >= CUBE__FAMILY_INVALID)
                return -EBADMSG;

        return unpack_value(o, family, 1, ret_error);
}
