/*
 * check-main.c - cube-device --check DIR CPU_SECONDS ADDRESS_SPACE_MB
 * FILE_SIZE_MB: one kernel source read by the front end, in a sandbox.
 *
 * The same confinement as a build (device-build.c): limits it sets itself,
 * no network, no privileges, writing only into DIR. It reads DIR/source and
 * DIR/entry and writes DIR/checked and DIR/facts. Exit 0: checked; 10: the
 * source breaks a rule of the dialect (DIR/log says which); 12: it is not C
 * the dialect accepts (DIR/log has the parser's words); 11: anything else.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "frontend.h"

#define EXIT_REFUSED 10
#define EXIT_DEFECT 11
#define EXIT_NOT_PARSED 12

static char *slurp(const char *dir, const char *name, size_t max)
{
        char path[PATH_MAX];
        FILE *f;
        char *buf;
        size_t n;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        if (!(f = fopen(path, "rb")))
                return NULL;
        buf = malloc(max + 1);
        if (buf) {
                n = fread(buf, 1, max, f);
                buf[n] = '\0';
        }
        fclose(f);
        return buf;
}

static int put_file(const char *dir, const char *name, const char *text)
{
        char path[PATH_MAX];
        FILE *f;
        int bad;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        if (!(f = fopen(path, "w")))
                return -1;
        bad = fputs(text ? text : "", f) < 0;
        bad |= fclose(f) != 0;
        return bad ? -1 : 0;
}

int cube__dev_check_main(int argc, char **argv)
{
        const char *dir;
        char *source, *entry, *checked = NULL, *facts = NULL, *error = NULL;

        if (argc != 6)
                return EXIT_DEFECT;
        dir = argv[2];
        cube__dev_confine(dir, argv[3], argv[4], argv[5]);

        source = slurp(dir, "source", 64u << 20);
        entry = slurp(dir, "entry", 64);
        if (!source || !entry)
                return EXIT_DEFECT;
        switch (cube__frontend_run(source, entry, &checked, &facts, &error)) {
        case CUBE__FE_OK:
                if (put_file(dir, "checked", checked) < 0 || put_file(dir, "facts", facts) < 0)
                        return EXIT_DEFECT;
                return 0;
        case CUBE__FE_REFUSED:
                return put_file(dir, "log", error) < 0 ? EXIT_DEFECT : EXIT_REFUSED;
        case CUBE__FE_DOES_NOT_PARSE:
                return put_file(dir, "log", error) < 0 ? EXIT_DEFECT : EXIT_NOT_PARSED;
        default:
                (void) put_file(dir, "log", error);
                return EXIT_DEFECT;
        }
}
