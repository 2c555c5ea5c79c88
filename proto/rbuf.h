/*
 * rbuf.h - the receive buffer both sides read a socket into.
 *
 * Unparsed bytes are [pos, len). need is how many bytes from pos the next
 * message needs in all, as the pre-scan last said; room for it is made as its
 * bytes arrive (doubling at most), never all at once for what it declares.
 */
#ifndef CUBE_PROTO_RBUF_H
#define CUBE_PROTO_RBUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct cube__rbuf {
        uint8_t *p;
        size_t cap, len, pos;
        size_t need;
        size_t keep;    /* room kept once consumed; 0: 256 KiB */
} cube__rbuf;

/* Makes room for at least chunk more bytes, and for the whole of the next
 * message when need says how long it is (at most twice what has arrived of
 * it); moves unparsed bytes to the front
 * before growing, and gives back room beyond keep once its message is
 * consumed. Returns 0, or -ENOMEM with the buffer unchanged. */
int cube__rbuf_reserve(cube__rbuf *b, size_t chunk);
/* Marks n bytes at pos as consumed. */
void cube__rbuf_consume(cube__rbuf *b, size_t n);
void cube__rbuf_free(cube__rbuf *b);

#endif
