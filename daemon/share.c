/*
 * share.c - export and import: the one way a session reaches another's memory.
 *
 * export answers an unguessable token (128 random bits) for an allocation;
 * import gives the calling session a name of its own for it, optionally
 * read-only. The memory lives until every holder has released it.
 */
#include <inttypes.h>
#include <string.h>

#include "cubed.h"

cube__dispatched cube__do_export(cube__msg *k)
{
        uint64_t memory;
        cube__name *n;
        const char *token;
        msgpack_sbuffer sb;
        msgpack_packer pk;

        if (k->n != 1 || !cube__obj_u64(&k->p[0], &memory)) {
                cube__reply_malformed(k, "params must be [memory]");
                return CUBE__DISPATCH_DONE;
        }
        n = cube__idmap_get(&k->session->memory, memory);
        if (!n) {
                cube__reply_owned_error(k, cube__err_not_found("memory %" PRIu64 " was never "
                                                               "created in this session, or was "
                                                               "freed", memory));
                return CUBE__DISPATCH_DONE;
        }
        if (n->read_only) {
                cube__reply_owned_error(k, cube__err_validation("memory %" PRIu64 " is a "
                                                                "read-only import: it may not be "
                                                                "exported again", memory));
                return CUBE__DISPATCH_DONE;
        }
        if (!(token = cube__alloc_export(n))) {
                cube__reply_owned_error(k, NULL);
                return CUBE__DISPATCH_DONE;
        }
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) == 0 && cube__pack_str(&pk, token) == 0)
                cube__reply_sbuffer(k->session, &sb);
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}

cube__dispatched cube__do_import(cube__msg *k)
{
        char token[40];
        uint64_t memory;
        bool read_only;
        cube__name *n;
        cube_error *e;
        msgpack_sbuffer sb;
        msgpack_packer pk;

        if (k->n != 3 || !cube__obj_str(&k->p[0], token, sizeof(token)) ||
            !cube__obj_u64(&k->p[1], &memory) || !cube__obj_bool(&k->p[2], &read_only)) {
                cube__reply_malformed(k, "params must be [token, memory, read_only]");
                return CUBE__DISPATCH_DONE;
        }
        if ((e = cube__alloc_import(k->session, token, memory, read_only, &n))) {
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        cube__log_session(CUBE__LOG_INFO, k->session, 0, "session %" PRIu64 " imported memory %"
                          PRIu64 " as %" PRIu64 "%s", k->session->id, n->alloc->id, memory,
                          read_only ? ", read-only" : "");
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) == 0 &&
            msgpack_pack_uint64(&pk, n->alloc->size) == 0)
                cube__reply_sbuffer(k->session, &sb);
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}
