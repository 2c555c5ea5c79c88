/*
 * rbuf.c - the receive buffer both sides read a socket into.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rbuf.h"

/* Room kept between messages; more is given back once a message is done. */
#define RBUF_KEEP (256 * 1024)

int cube__rbuf_reserve(cube__rbuf *b, size_t chunk)
{
        size_t want;

        if (b->pos == b->len) {
                b->pos = b->len = 0;
                if (b->cap > (b->keep ? b->keep : RBUF_KEEP)) {
                        free(b->p);
                        b->p = NULL;
                        b->cap = 0;
                }
        }
        /* Room for what a message declares is made as its bytes arrive, at
         * most doubling what has come: a declared size costs nothing. */
        want = b->len + chunk;
        if (b->need > 0 && b->pos + b->need > want) {
                size_t grown = b->len + (b->len - b->pos > chunk ? b->len - b->pos : chunk);
                want = b->pos + b->need < grown ? b->pos + b->need : grown;
        }
        if (want > b->cap && b->pos > 0) {
                memmove(b->p, b->p + b->pos, b->len - b->pos);
                b->len -= b->pos;
                want -= b->pos;
                b->pos = 0;
        }
        if (want > b->cap) {
                uint8_t *grown = realloc(b->p, want);
                if (!grown)
                        return -ENOMEM;
                b->p = grown;
                b->cap = want;
        }
        return 0;
}

void cube__rbuf_consume(cube__rbuf *b, size_t n)
{
        b->pos += n;
        if (b->pos == b->len)
                b->pos = b->len = 0;
}

void cube__rbuf_free(cube__rbuf *b)
{
        free(b->p);
        *b = (cube__rbuf) {0};
}
