/*
 * device-binary.c - PoCL's program binaries without their LLVM IR.
 *
 * PoCL builds a work-group function when a launch needs one it lacks: the
 * generic one, or one specialised for the launch's local size. It can do so
 * only while the program holds its IR (program.bc), and doing it runs the
 * code generator and the linker, which the sealed device must never do: its
 * seal forbids both, and a device that tried would die with every tenant's
 * work in it. So every artifact a build writes carries its work-group
 * functions but not the IR (PoCL's own "binary without online compilation"
 * path): the device then runs the specialised function where the artifact
 * has one for the launch's local size, and the generic one everywhere else,
 * and compiles nothing. A load of a binary that still holds IR is refused.
 *
 * The layout is PoCL's binary format, version 9 (PoCL 3.x): a header, then
 * root entries (each a byte count and the files it holds: program.bc), then
 * the kernels. Each root entry becomes one empty file of another name, as
 * PoCL requires every entry to hold something.
 */
#include <stdint.h>
#include <string.h>

#include "device.h"

#define POCL_MAGIC "poclbin"
#define POCL_VERSION 9u
#define POCL_MAGIC_LEN 8
#define POCL_ROOTS_AT (POCL_MAGIC_LEN + 8 + 4 + 4 + 8)  /* id, version, kernels, flags */
#define POCL_HASH_LEN 41                                 /* SHA-1 in hex, and its NUL */
#define NO_IR_NAME "/program.no-ir"

/* The empty file that stands for a root entry without IR: its name's
 * length and name, and a content of 0 bytes. */
#define NO_IR_ENTRY_LEN (4 + sizeof(NO_IR_NAME) - 1 + 4)

static bool header_ok(const unsigned char *bin, size_t len, uint32_t *ret_roots)
{
        uint32_t version;

        if (len < POCL_ROOTS_AT + 4 + POCL_HASH_LEN ||
            memcmp(bin, POCL_MAGIC, sizeof(POCL_MAGIC)) != 0)
                return false;
        memcpy(&version, bin + POCL_MAGIC_LEN + 8, sizeof(version));
        memcpy(ret_roots, bin + POCL_ROOTS_AT, sizeof(*ret_roots));
        return version == POCL_VERSION && *ret_roots <= 16;
}

static void no_ir_entry(unsigned char out[NO_IR_ENTRY_LEN])
{
        uint32_t name_len = sizeof(NO_IR_NAME) - 1, content_len = 0;

        memcpy(out, &name_len, 4);
        memcpy(out + 4, NO_IR_NAME, name_len);
        memcpy(out + 4 + name_len, &content_len, 4);
}

int cube__dev_binary_strip_ir(unsigned char *bin, size_t *len)
{
        uint32_t roots;
        size_t at = POCL_ROOTS_AT + 4 + POCL_HASH_LEN;

        if (!header_ok(bin, *len, &roots))
                return -1;
        for (uint32_t i = 0; i < roots; i++) {
                uint64_t size, fresh = NO_IR_ENTRY_LEN;
                if (*len - at < sizeof(size))
                        return -1;
                memcpy(&size, bin + at, sizeof(size));
                if (size > *len - at - sizeof(size) || size < fresh)
                        return -1;
                at += sizeof(size);
                memmove(bin + at + fresh, bin + at + size, *len - at - size);
                no_ir_entry(bin + at);
                memcpy(bin + at - sizeof(size), &fresh, sizeof(fresh));
                *len -= size - fresh;
                at += fresh;
        }
        return 0;
}

bool cube__dev_binary_without_ir(const unsigned char *bin, size_t len)
{
        unsigned char empty[NO_IR_ENTRY_LEN];
        uint32_t roots;
        size_t at = POCL_ROOTS_AT + 4 + POCL_HASH_LEN;

        if (!header_ok(bin, len, &roots))
                return false;
        no_ir_entry(empty);
        for (uint32_t i = 0; i < roots; i++) {
                uint64_t size;
                if (len - at < sizeof(size) + sizeof(empty))
                        return false;
                memcpy(&size, bin + at, sizeof(size));
                if (size != sizeof(empty) || memcmp(bin + at + sizeof(size), empty, sizeof(empty)))
                        return false;
                at += sizeof(size) + sizeof(empty);
        }
        return true;
}
