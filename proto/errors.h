/*
 * errors.h - the error taxonomy both sides share: how a cube_error is built,
 * what it says, and how it travels over the wire.
 *
 * The public accessors are declared in cube.h; this header adds what only the
 * daemon and the client library need: the node layout, constructors, and the
 * msgpack encoding (see proto/PROTOCOL.md, "Errors").
 */
#ifndef CUBE_PROTO_ERRORS_H
#define CUBE_PROTO_ERRORS_H

#include <msgpack.h>

#include "cube.h"

/* One node of the taxonomy tree. Which fields mean something depends on the
 * kind; cube.h lists them beside each variant. */
struct cube_error {
        cube_error_kind kind;
        char *text;             /* reason / message / description; ForeignHandle's handle;
                                   ServiceMismatch's client; ExpansionPanicked's kernel */
        char *text2;            /* ForeignHandle's client; ServiceMismatch's requested;
                                   ExpansionPanicked's message */
        uint64_t a;             /* size, requested, failure */
        uint64_t b;             /* max, claimed */
        uint32_t dim_requested[3];
        uint32_t dim_max[3];
        int operation;          /* a cube_collective */
        char **chain;           /* Unwritten */
        size_t n_chain;
        cube_error **members;   /* Several; or the single source at members[0] */
        size_t n_members;
        char *rendered;         /* cube_error_message()'s cache */
};

/* Constructors. Each returns a new node the caller owns, or NULL when memory
 * ran out. A constructor that takes a source takes ownership of it. Strings
 * are copied. */
cube_error *cube__err_new(cube_error_kind kind);
cube_error *cube__err_text(cube_error_kind kind, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
cube_error *cube__err_wrap(cube_error_kind kind, cube_error *source);
cube_error *cube__err_size(cube_error_kind kind, uint64_t size);

cube_error *cube__err_validation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
cube_error *cube__err_generic(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
cube_error *cube__err_foreign_handle(const char *handle_service, const char *client_service);
cube_error *cube__err_service_mismatch(const char *client_service, const char *requested);
cube_error *cube__err_no_device_transport(cube_collective operation);
/* ServerError::Io(IoError::<kind>{size}) */
cube_error *cube__err_io_size(cube_error_kind io_kind, uint64_t size);
/* ServerError::Io(IoError::NotFound{reason}) */
cube_error *cube__err_not_found(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* DevicePoison{reason}, bare (wrap it in the variant the path needs). */
cube_error *cube__err_poison(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
cube_error *cube__err_expansion_panicked(const char *kernel, const char *message);
cube_error *cube__err_resource(cube_error_kind kind, uint64_t requested, uint64_t max);
cube_error *cube__err_cube_dim(const uint32_t requested[3], const uint32_t max[3]);
cube_error *cube__err_storage_mapping_failed(uint64_t size, cube_error *io_source);
cube_error *cube__err_unwritten(uint64_t failure, uint32_t claimed, char **chain, size_t n_chain,
                                cube_error *root);
/* Several{}: members are added with cube__err_several_add. */
cube_error *cube__err_several(void);
int cube__err_several_add(cube_error *several, cube_error *member);

/* Which enum a kind belongs to. */
typedef enum cube__err_family {
        CUBE__FAMILY_SERVER,
        CUBE__FAMILY_LAUNCH,
        CUBE__FAMILY_COMPILATION,
        CUBE__FAMILY_RESOURCE,
        CUBE__FAMILY_IO,
        CUBE__FAMILY_PROFILE,
        CUBE__FAMILY_POISON,
        CUBE__FAMILY_INVALID,
} cube__err_family;

cube__err_family cube__err_family_of(cube_error_kind kind);

/* Encodes e as PROTOCOL.md describes: [variant, payload]. Returns 0, or -ENOMEM
 * (-EINVAL for a node built by hand that lacks what its kind requires). */
int cube__err_pack(msgpack_packer *pk, const cube_error *e);

/* Decodes a value of the given family from a msgpack object. Nesting deeper
 * than 64 error levels is refused. Returns 0 and sets *ret_error, or -EBADMSG
 * when the object is not a valid encoding, or -ENOMEM. */
int cube__err_unpack(const msgpack_object *o, cube__err_family family, cube_error **ret_error);

/* Structural equality of two trees, for tests and for deduplication. */
bool cube__err_equal(const cube_error *a, const cube_error *b);

#endif
