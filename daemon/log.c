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
#include <sys/uio.h>
#include <systemd/sd-journal.h>

#include "services.h"

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

/* Writes one entry. On stderr every line of a multi-line message carries
 * the prefix, so a continuation line cannot pass for an entry of its own. */
void cube__log_at(const cube__log_site *at, int level, const cube__log_who *who, uint64_t failure,
                  const char *fmt, ...)
{
        static const char *const names[] = {
                [CUBE__LOG_ERR] = "error", [CUBE__LOG_WARNING] = "warning",
                [CUBE__LOG_NOTICE] = "notice", [CUBE__LOG_INFO] = "info",
                [CUBE__LOG_DEBUG] = "debug",
        };
        char line[2048];
        va_list ap;

        if (level > max_level)
                return;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        if (!journal) {
                const char *p = line;
                do {
                        size_t n = strcspn(p, "\n");
                        fprintf(stderr, "cubed: %s: %.*s\n", names[level], (int) n, p);
                        p += n;
                } while (*p++ == '\n' && *p);
                return;
        }
        char fields[10][320], file[256], lineno[32];
        struct iovec iov[12];
        int n = 0;
#define FIELD(...) do { \
                snprintf(fields[n], sizeof(fields[n]), __VA_ARGS__); \
                iov[n] = (struct iovec) { fields[n], strlen(fields[n]) }; \
                n++; \
        } while (0)
        iov[n++] = (struct iovec) { (char *) "SYSLOG_IDENTIFIER=cubed", 23 };
        FIELD("PRIORITY=%d", level);
        if (at->message_id)
                FIELD("MESSAGE_ID=%s", at->message_id);
        if (who) {
                FIELD("CUBE_SESSION=%llu", (unsigned long long) who->session);
                FIELD("CUBE_PEER_PID=%d", (int) who->pid);
                FIELD("CUBE_PEER_UID=%u", (unsigned) who->uid);
                if (who->name && *who->name)
                        FIELD("CUBE_SESSION_NAME=%s", who->name);
        }
        if (failure)
                FIELD("CUBE_FAILURE=%llu", (unsigned long long) failure);
#undef FIELD
        char *message = malloc(strlen(line) + sizeof("MESSAGE="));
        if (!message)
                return;
        sprintf(message, "MESSAGE=%s", line);
        iov[n++] = (struct iovec) { message, strlen(message) };
        snprintf(file, sizeof(file), "CODE_FILE=%s", at->file);
        snprintf(lineno, sizeof(lineno), "CODE_LINE=%d", at->line);
        sd_journal_sendv_with_location(file, lineno, at->func, iov, n);
        free(message);
}
