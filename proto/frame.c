/*
 * frame.c - a message being packed, on the stack while it is small: most
 * messages either side sends are a few dozen bytes, and packing them into an
 * msgpack_sbuffer costs a malloc and a free each.
 */
#include <stdlib.h>
#include <string.h>

#include "frame.h"

static int frame_write(void *data, const char *buf, size_t len)
{
        cube__frame *f = data;

        if (len > f->cap - f->len) {
                size_t cap = f->cap * 2 > f->len + len ? f->cap * 2 : f->len + len;
                char *grown = f->data == f->room ? malloc(cap) : realloc(f->data, cap);
                if (!grown)
                        return -1;
                if (f->data == f->room)
                        memcpy(grown, f->room, f->len);
                f->data = grown;
                f->cap = cap;
        }
        if (len) {
                memcpy(f->data + f->len, buf, len);
                f->len += len;
        }
        return 0;
}

void cube__frame_init(cube__frame *f)
{
        f->data = f->room;
        f->len = 0;
        f->cap = sizeof(f->room);
        msgpack_packer_init(&f->pk, f, frame_write);
}

void cube__frame_destroy(cube__frame *f)
{
        if (f->data != f->room)
                free(f->data);
        cube__frame_init(f);
}
