/*
 * direct.c - large inline writes received straight into device memory.
 *
 * An inline write's payload is normally read into the connection's buffer
 * and copied to the device by the backend: for a 64 MiB write that copy
 * costs a quarter of the transfer again. When the device's memory is
 * addressable by the host and nothing else can see the target while the
 * payload arrives, the daemon instead reads the payload from the socket into
 * the target itself, as soon as the write's header is in.
 *
 * It is done when no queued or running work uses the target. When its
 * session is its only holder and it was never exported, nothing else can
 * see it while the payload arrives (the session itself sends nothing else
 * until the payload is whole), so the write's order is unobservable and it
 * needs no place in the queue. A target another session holds, or may
 * import, gets one: the write is queued as host work (work.c's scoped
 * write), and that session's work on it waits for the payload. A payload
 * cut short (the peer hung up mid-message) then leaves the range claimed by
 * TornDown, the error of a write scope that never reached its exit, which
 * the other holders' reads report. Everything a queued write checks first
 * (poison, read-only, size, stream quota, an armed copy fault) makes the
 * write take the queued path instead, which reports it as usual.
 */
#include <string.h>

#include "requests.h"

/* Smaller payloads are not worth the header parse. */
#define DIRECT_MIN (1u << 20)

/* Decodes one object of the message prefix at *off. */
static bool next_object(cube__server *srv, const uint8_t *p, size_t avail, size_t *off,
                        msgpack_object *ret)
{
        msgpack_unpack_return r = msgpack_unpack((const char *) p, avail, off, srv->zone, ret);

        return r == MSGPACK_UNPACK_SUCCESS || r == MSGPACK_UNPACK_EXTRA_BYTES;
}

/* Parses [2, "write", [stream, handle, bin]] up to the payload, from the
 * avail bytes of a message of mlen. Returns whether it is such a write whose
 * payload ends the message. */
static bool parse_prefix(cube__server *srv, const uint8_t *p, size_t avail, size_t mlen,
                         uint64_t *ret_stream, cube_handle *ret_handle, size_t *ret_header,
                         uint64_t *ret_len)
{
        msgpack_object o;
        size_t off = 1;
        uint64_t type, len;

        if (avail < 2 || p[0] != 0x93)
                return false;
        if (!next_object(srv, p, avail, &off, &o) || !cube__obj_u64(&o, &type) ||
            type != CUBE__MSG_NOTIFY)
                return false;
        if (!next_object(srv, p, avail, &off, &o) || o.type != MSGPACK_OBJECT_STR ||
            o.via.str.size != 5 || memcmp(o.via.str.ptr, "write", 5) != 0)
                return false;
        if (off >= avail || p[off++] != 0x93)
                return false;
        if (!next_object(srv, p, avail, &off, &o) || !cube__obj_u64(&o, ret_stream))
                return false;
        if (!next_object(srv, p, avail, &off, &o) || !cube__obj_handle(&o, ret_handle))
                return false;
        if (off + 5 > avail)
                return false;
        switch (p[off]) {
        case 0xc4: len = p[off + 1]; off += 2; break;
        case 0xc5: len = (uint64_t) p[off + 1] << 8 | p[off + 2]; off += 3; break;
        case 0xc6:
                len = (uint64_t) p[off + 1] << 24 | (uint64_t) p[off + 2] << 16 |
                      (uint64_t) p[off + 3] << 8 | p[off + 4];
                off += 5;
                break;
        default:
                return false;
        }
        if (off + len != mlen)
                return false;
        *ret_header = off;
        *ret_len = len;
        return true;
}

bool cube__direct_begin(cube__session *s, const uint8_t *msg, size_t avail, size_t mlen,
                        cube__direct *ret)
{
        cube__server *srv = s->server;
        uint64_t stream, len, start, end;
        size_t header;
        cube_handle h;
        cube__name *n;
        cube__alloc *a;
        cube__stream *st;
        cube__op *scope = NULL;
        cube_error *e;
        char *base;

        if (mlen < DIRECT_MIN || srv->poison || srv->inject[CUBE_FAULT_COPY] || srv->zone_busy ||
            !srv->driver->host_view)
                return false;
        srv->zone_busy = true;
        bool parsed = parse_prefix(srv, msg, avail, mlen, &stream, &h, &header, &len);
        msgpack_zone_clear(srv->zone);
        srv->zone_busy = false;
        if (!parsed)
                return false;
        if ((e = cube__name_resolve(s, &h, &n, &start, &end))) {
                cube_error_free(e);
                return false;
        }
        a = n->alloc;
        if (n->read_only || end - start != len || !a->storage || a->pending ||
            !(base = srv->driver->host_view(srv->device, a->storage)))
                return false;
        if (!(st = cube__stream_get(s, stream, &e))) {
                cube_error_free(e);
                return false;
        }

        /* The bytes are this write's from now on, as a queued write's are
         * from its dispatch; the count keeps the allocation alive. */
        if (a->holders == 1 && !a->token[0])
                cube__claims_written(&srv->failures, &a->claims, start, end);
        else if (!(scope = cube__scoped_write_begin(s, st, a, start, end)))
                return false;
        a->pending++;
        *ret = (cube__direct) {
                .alloc = a,
                .scope = scope,
                .dst = base + a->base + start,
                .left = len,
        };
        memcpy(ret->dst, msg + header, avail - header);
        cube__direct_advance(ret, avail - header);
        return true;
}

void cube__direct_advance(cube__direct *d, size_t n)
{
        d->dst += n;
        d->left -= n;
        if (d->left == 0)
                cube__direct_end(d);
}

void cube__direct_end(cube__direct *d)
{
        if (d->scope)
                cube__scoped_write_end(d->scope, d->left == 0);
        if (d->alloc)
                cube__alloc_unref(d->alloc);
        *d = (cube__direct) {0};
}
