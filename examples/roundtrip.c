/*
 * roundtrip - the smallest cube program: put bytes on the device, read them
 * back, and compare.
 *
 *   mkdir -m 0700 /tmp/cube && cubed --socket /tmp/cube/s &
 *   roundtrip /tmp/cube/s
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube.h"

static int fail(const char *what, cube_error *e)
{
        fprintf(stderr, "roundtrip: %s: %s\n", what, cube_error_message(e));
        cube_error_free(e);
        return 1;
}

int main(int argc, char **argv)
{
        const size_t n = 1 << 20;
        unsigned char *data = malloc(n), *back = malloc(n);
        cube_client *c;
        cube_handle h;
        cube_error *e;

        if (!data || !back)
                return 1;
        for (size_t i = 0; i < n; i++)
                data[i] = (unsigned char) (i * 2654435761u >> 24);

        e = cube_connect(argc > 1 ? argv[1] : NULL, "roundtrip", &c);
        if (e)
                return fail("connect", e);
        printf("connected to %s (%s backend)\n", cube_client_service(c), cube_client_backend(c));

        if ((e = cube_create(c, data, n, &h)))
                return fail("create", e);
        if ((e = cube_read(c, &h, back, n)))
                return fail("read", e);
        if (memcmp(data, back, n) != 0) {
                fprintf(stderr, "roundtrip: the bytes read back differ from those written\n");
                return 1;
        }
        printf("wrote and read back %zu bytes: identical\n", n);
        if ((e = cube_free(c, &h)))
                return fail("free", e);
        cube_disconnect(c);
        free(data);
        free(back);
        return 0;
}
