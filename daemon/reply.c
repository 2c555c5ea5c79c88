/*
 * reply.c - answering the request being handled: how the work, and the
 * requests above it, frame their answers.
 *
 * Sending an answer is the connection's business, a layer up; the work
 * reaches it only through the server's upcalls (cube__upcalls), so that
 * nothing below the requests calls into connections or sessions.
 */
#include <stdlib.h>
#include <string.h>

#include "cubed.h"
#include "frame.h"

void cube__reply_sbuffer(cube__session *s, msgpack_sbuffer *sb)
{
        size_t len = sb->size;
        char *frame = msgpack_sbuffer_release(sb);

        if (!s->conn) {
                free(frame);
                return;
        }
        s->bytes_out += len;
        s->server->up->send(s->conn, frame, len, -1);
}

void cube__reply_error(cube__session *s, uint32_t msgid, const cube_error *error)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        s->errors++;
        if (cube_error_is_device_poisoned(error))
                s->server->up->poison_told(s->server, s);
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_error(&pk, msgid, error) == 0)
                cube__reply_sbuffer(s, &sb);
        msgpack_sbuffer_destroy(&sb);
}

void cube__reply_sbuffer_fd(cube__msg *k, msgpack_sbuffer *sb, int fd)
{
        size_t len = sb->size;

        k->server->up->send(k->conn, msgpack_sbuffer_release(sb), len, fd);
}

bool cube__reply_malformed(cube__msg *k, const char *what)
{
        char method[64];
        size_t n = k->env->method_len < sizeof(method) - 1 ? k->env->method_len : sizeof(method) - 1;

        memcpy(method, k->env->method, n);
        method[n] = '\0';
        k->server->up->protocol_error(k->conn, k->env->type == CUBE__MSG_REQUEST ?
                                      (int64_t) k->env->msgid : -1, "%s: %s", method, what);
        return false;
}

/* The commonest answer (every idle sync), packed on the stack. */
void cube__reply_ok_nil(cube__msg *k)
{
        cube__session *s = k->session;
        cube__frame f;

        /* [1, msgid, nil, nil]: at most 9 bytes, a small answer. */
        cube__frame_init(&f);
        if (cube__pack_response_ok(&f.pk, k->env->msgid) == 0 && msgpack_pack_nil(&f.pk) == 0 &&
            s->conn) {
                s->bytes_out += f.len;
                k->server->up->send_small(s->conn, f.data, f.len);
        }
        cube__frame_destroy(&f);
}

void cube__reply_owned_error(cube__msg *k, cube_error *e)
{
        if (!e)
                e = cube__err_generic("out of host memory while answering");
        cube__reply_error(k->session, k->env->msgid, e);
        cube_error_free(e);
}
