/*
 * log.c - levelled logging to stderr.
 *
 * Under systemd (stderr connected to the journal) each line carries the
 * sd-daemon "<N>" priority prefix so journald files it at the right level;
 * elsewhere lines read "cubed: warning: ...".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubed.h"

static int max_level = CUBE__LOG_NOTICE;
static int journal;

void cube__log_init(int level)
{
        max_level = level;
        journal = getenv("JOURNAL_STREAM") != NULL;
}

void cube__log(int level, const char *fmt, ...)
{
        static const char *const names[] = {
                [CUBE__LOG_ERR] = "error", [CUBE__LOG_WARNING] = "warning",
                [CUBE__LOG_NOTICE] = "notice", [CUBE__LOG_INFO] = "info",
                [CUBE__LOG_DEBUG] = "debug",
        };
        char line[1024];
        va_list ap;

        if (level > max_level)
                return;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        if (journal)
                fprintf(stderr, "<%d>%s\n", level, line);
        else
                fprintf(stderr, "cubed: %s: %s\n", names[level], line);
}
