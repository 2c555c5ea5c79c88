/*
 * fuzz-replay.c - runs a fuzz target over a saved corpus without libFuzzer,
 * so compilers without it still check every input as an ordinary test.
 * Each argument is a file, or a directory whose files are replayed (one
 * level, in name order).
 */

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int read_file(const char *path, uint8_t **ret_data, size_t *ret_size) {
        FILE *f = fopen(path, "rb");
        uint8_t *data = NULL;
        size_t size = 0, cap = 0;

        if (!f)
                return -errno;

        for (;;) {
                if (size == cap) {
                        uint8_t *bigger;

                        cap = cap ? cap * 2 : 4096;
                        bigger = realloc(data, cap);
                        if (!bigger) {
                                free(data);
                                fclose(f);
                                return -ENOMEM;
                        }
                        data = bigger;
                }
                size_t n = fread(data + size, 1, cap - size, f);
                size += n;
                if (n == 0)
                        break;
        }

        if (ferror(f)) {
                free(data);
                fclose(f);
                return -EIO;
        }
        fclose(f);

        *ret_data = data;
        *ret_size = size;
        return 0;
}

static int replay_file(const char *path, unsigned *count) {
        uint8_t *data = NULL;
        size_t size = 0;
        int r;

        r = read_file(path, &data, &size);
        if (r < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(-r));
                return r;
        }

        LLVMFuzzerTestOneInput(data, size);
        free(data);
        (*count)++;
        return 0;
}

/* Replays the regular files directly inside path, skipping subdirectories. */
static int replay_directory(const char *path, unsigned *count) {
        struct dirent **entries;
        int n, r = 0;

        n = scandir(path, &entries, NULL, alphasort);
        if (n < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -errno;
        }

        for (int i = 0; i < n; i++) {
                char child[4096];
                struct stat st;

                if (entries[i]->d_name[0] == '.')
                        goto next;
                if ((size_t) snprintf(child, sizeof child, "%s/%s", path, entries[i]->d_name) >= sizeof child) {
                        fprintf(stderr, "%s/%s: path too long\n", path, entries[i]->d_name);
                        r = -ENAMETOOLONG;
                        goto next;
                }
                if (stat(child, &st) < 0 || !S_ISREG(st.st_mode))
                        goto next;
                if (replay_file(child, count) < 0)
                        r = -EIO;
        next:
                free(entries[i]);
        }
        free(entries);
        return r;
}

int main(int argc, char *argv[]) {
        unsigned count = 0;
        int failed = 0;

        for (int i = 1; i < argc; i++) {
                struct stat st;

                if (stat(argv[i], &st) < 0) {
                        fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
                        failed = 1;
                        continue;
                }
                if (S_ISDIR(st.st_mode) ? replay_directory(argv[i], &count) < 0 : replay_file(argv[i], &count) < 0)
                        failed = 1;
        }

        printf("%u inputs replayed\n", count);
        return failed;
}
