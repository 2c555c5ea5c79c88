/*
 * log.c - levelled logging: structured entries to the journal under systemd,
 * plain lines on stderr elsewhere.
 *
 * Under systemd, when stderr is the journal's stream ($JOURNAL_STREAM names
 * it), each entry goes to journald natively with fields an operator can
 * filter on: CUBE_SESSION, CUBE_PEER_PID, CUBE_PEER_UID and CUBE_FAILURE
 * (`journalctl -u cubed@cpu0 CUBE_SESSION=7`). Elsewhere each line reads
 * "cubed: warning: ...".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-journal.h>

#include "cubed.h"

static int max_level = CUBE__LOG_NOTICE;
static bool journal;

/* Whether stderr is the stream $JOURNAL_STREAM says journald gave us. */
static bool stderr_is_journal(void)
{
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;

        return e && sscanf(e, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0 &&
               (unsigned long long) st.st_dev == dev && (unsigned long long) st.st_ino == ino;
}

void cube__log_init(int level)
{
        max_level = level;
        journal = stderr_is_journal();
}

static void emit(int level, const cube__session *s, uint64_t failure, const char *fmt, va_list ap)
{
        static const char *const names[] = {
                [CUBE__LOG_ERR] = "error", [CUBE__LOG_WARNING] = "warning",
                [CUBE__LOG_NOTICE] = "notice", [CUBE__LOG_INFO] = "info",
                [CUBE__LOG_DEBUG] = "debug",
        };
        char line[1024];

        if (level > max_level)
                return;
        vsnprintf(line, sizeof(line), fmt, ap);
        if (!journal) {
                fprintf(stderr, "cubed: %s: %s\n", names[level], line);
                return;
        }
        if (s && failure)
                sd_journal_send("MESSAGE=%s", line, "PRIORITY=%d", level,
                                "SYSLOG_IDENTIFIER=cubed", "CUBE_SESSION=%llu",
                                (unsigned long long) s->id, "CUBE_PEER_PID=%d", (int) s->pid,
                                "CUBE_PEER_UID=%u", (unsigned) s->uid, "CUBE_FAILURE=%llu",
                                (unsigned long long) failure, NULL);
        else if (s)
                sd_journal_send("MESSAGE=%s", line, "PRIORITY=%d", level,
                                "SYSLOG_IDENTIFIER=cubed", "CUBE_SESSION=%llu",
                                (unsigned long long) s->id, "CUBE_PEER_PID=%d", (int) s->pid,
                                "CUBE_PEER_UID=%u", (unsigned) s->uid, NULL);
        else
                sd_journal_send("MESSAGE=%s", line, "PRIORITY=%d", level,
                                "SYSLOG_IDENTIFIER=cubed", NULL);
}

void cube__log(int level, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        emit(level, NULL, 0, fmt, ap);
        va_end(ap);
}

void cube__log_session(int level, const cube__session *s, uint64_t failure, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        emit(level, s, failure, fmt, ap);
        va_end(ap);
}
