/*
 * frame.h - a message being packed, on the stack while it is small.
 */
#ifndef CUBE_PROTO_FRAME_H
#define CUBE_PROTO_FRAME_H

#include <stddef.h>
#include <msgpack.h>

/* A frame being packed: in its own room while it is small, which is almost
 * always, and on the heap beyond that. It points into itself, so it is
 * packed and used where it was declared. */
typedef struct cube__frame {
        msgpack_packer pk;
        char *data;
        size_t len, cap;
        char room[256];
} cube__frame;

void cube__frame_init(cube__frame *f);
/* Frees what the frame allocated and leaves it empty. */
void cube__frame_destroy(cube__frame *f);

#endif
