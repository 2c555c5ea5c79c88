/*
 * sha256.h - SHA-256, for kernel cache keys.
 *
 * The cache is shared by every session, so its key must not be forgeable: a
 * client able to collide with another's source would have its own code run
 * in the other's place. A cryptographic hash makes that infeasible.
 */
#ifndef CUBE_SHA256_H
#define CUBE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct cube__sha256 {
        uint32_t h[8];
        uint64_t len;
        uint8_t buf[64];
        size_t n;
} cube__sha256;

void cube__sha256_init(cube__sha256 *s);
void cube__sha256_update(cube__sha256 *s, const void *data, size_t len);
/* Writes the digest as 64 lowercase hex digits and a NUL. */
void cube__sha256_hex(cube__sha256 *s, char ret[65]);

#endif
