/*
 * kernel-check.c - every kernel source read by the front end before any
 * backend compiles it.
 *
 * The front end (backends/frontend/) parses the source with a real C front
 * end, refuses what cannot be kept in bounds, and rewrites every access it
 * cannot prove in range into a guarded one; it also says what the daemon
 * needs at launch: each buffer's element type and whether the body reads
 * or writes it, the scalars and their types, where each guarded access is.
 * It runs in a confined child (cube-device --check, sandbox.c) under the
 * compile limit, because parsing a hostile source is work a hostile source
 * can make expensive. What the child says is read as untrusted text.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cubed.h"
#include "frontend.h"
#include "sandbox.h"

#define CHECK_AS_MB 2048
#define CHECK_FSIZE_MB 256

static cube_error *defect(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static cube_error *defect(const char *fmt, ...)
{
        char text[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN, "%s", text));
}

/* The entry points the facts name, for the artifact's record. */
static void list_entries(cube__kernel *k)
{
        size_t at = 0;

        k->entries[0] = '\0';
        for (const char *p = k->facts_text; p && (p = strstr(p, "entry ")); p += 6) {
                if (p != k->facts_text && p[-1] != '\n')
                        continue;
                size_t n = strcspn(p + 6, "\n");
                if (at + (at > 0) + n >= sizeof(k->entries))
                        break;
                at += (size_t) snprintf(k->entries + at, sizeof(k->entries) - at, "%s%.*s",
                                        at ? "," : "", (int) n, p + 6);
        }
}

/* What a check that did not exit 0 means. Parsing is deterministic, so a
 * front end stopped by its limits, or dying, on one source is that source's
 * doing: a refusal, remembered. A check that could not run at all, or
 * starved without using its CPU time, is a defect, tried again later. */
static cube_error *judge(const cube__kernel *k, const cube__sandbox_result *res, unsigned cpu_s,
                         const char *log)
{
        int status = res->status, sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        double cpu = (double) res->ru.ru_utime.tv_sec + (double) res->ru.ru_stime.tv_sec +
                     ((double) res->ru.ru_utime.tv_usec + (double) res->ru.ru_stime.tv_usec) / 1e6;
        bool ran_out = cpu + 0.5 >= (double) cpu_s;

        if (WIFEXITED(status) && WEXITSTATUS(status) == 10)
                return cube__err_text(CUBE_COMPILATION_VALIDATION, "%s", log ? log : "");
        if (WIFEXITED(status) && WEXITSTATUS(status) == 12)
                return cube__err_text(CUBE_COMPILATION_GENERIC, "kernel '%s' is not C the dialect "
                                      "accepts:\n%s", k->entry, log ? log : "");
        if (res->wall_timeout && !ran_out)
                return defect("checking kernel '%s' outlived its wall-clock limit after only "
                              "%.1f s of CPU time (the machine is starved); a later launch tries "
                              "again", k->entry, cpu);
        if (res->wall_timeout || ((sig == SIGXCPU || sig == SIGKILL) && ran_out))
                return cube__err_text(CUBE_COMPILATION_GENERIC, "checking kernel '%s' ran past "
                                      "its CPU time limit of %u s (compile-limit) and was "
                                      "stopped", k->entry, cpu_s);
        if (sig == SIGXFSZ)
                return cube__err_text(CUBE_COMPILATION_GENERIC, "checking kernel '%s' wrote past "
                                      "its output limit of %u MiB and was stopped", k->entry,
                                      CHECK_FSIZE_MB);
        if (sig)
                return cube__err_text(CUBE_COMPILATION_GENERIC, "the kernel front end died of "
                                      "SIG%s reading kernel '%s'%s", sigabbrev_np(sig) ?
                                      sigabbrev_np(sig) : "?", k->entry,
                                      log && (strstr(log, "out of memory") ||
                                              strstr(log, "bad_alloc")) ?
                                      ": it ran past its address-space limit" : " (a source "
                                      "too large or too deep to read)");
        return defect("the kernel front end failed checking kernel '%s'; a later launch tries "
                      "again: %s", k->entry, log && *log ? log : "it said nothing");
}

cube_error *cube__kernel_check(cube__kernel *k, bool in_cache)
{
        cube__server *srv = k->server;
        unsigned cpu_s = srv->opts.compile_limit_s ? srv->opts.compile_limit_s : 60;
        char helper[PATH_MAX], dir[PATH_MAX];
        cube__sandbox_result res;
        cube_error *e = NULL;
        char *checked = NULL, *facts_text = NULL, *log = NULL;
        int r;

        if (cube__device_helper(helper, sizeof(helper)) < 0)
                return defect("no kernel front end: cube-device is not installed beside cubed");
        snprintf(dir, sizeof(dir), "%s/.check-XXXXXX", in_cache ? srv->opts.cache_dir : "/tmp");
        if (!mkdtemp(dir))
                return defect("cannot make a directory to check kernel '%s' in: %s", k->entry,
                              strerror(errno));
        if ((r = cube__sandbox_write(dir, "source", k->source)) < 0 ||
            (r = cube__sandbox_write(dir, "entry", k->entry)) < 0) {
                e = defect("cannot write kernel '%s' for its check: %s", k->entry, strerror(-r));
                goto out;
        }
        if ((r = cube__sandbox_run(helper, "--check", dir, cpu_s, CHECK_AS_MB, CHECK_FSIZE_MB, NULL,
                                   &res)) != 0) {
                e = defect("cannot run the kernel front end (%s): %s", helper, strerror(r));
                goto out;
        }
        if (res.wall_timeout || !WIFEXITED(res.status) || WEXITSTATUS(res.status) != 0) {
                log = cube__sandbox_read(dir, "log", 16 * 1024);
                if (!log || !*log) {
                        free(log);
                        log = cube__sandbox_read(dir, "stderr", 4 * 1024);
                }
                e = judge(k, &res, cpu_s, log);
                goto out;
        }
        checked = cube__sandbox_read(dir, "checked", (size_t) CHECK_FSIZE_MB << 20);
        facts_text = cube__sandbox_read(dir, "facts", 16u << 20);
        cube__fe_facts *facts = facts_text ? cube__fe_facts_parse(facts_text, k->entry) : NULL;
        if (!checked || !facts) {
                cube__fe_facts_free(facts);
                e = defect("the kernel front end's answer for kernel '%s' cannot be read; a "
                           "later launch tries again", k->entry);
                goto out;
        }
        char *source = NULL;
        if (asprintf(&source, "#define CUBE__CHECKED %d\n%s", !k->unchecked, checked) < 0) {
                cube__fe_facts_free(facts);
                e = defect("out of host memory checking kernel '%s'", k->entry);
                goto out;
        }
        cube__fe_facts_free(k->facts);
        free(k->checked);
        free(k->facts_text);
        k->facts = facts;
        k->checked = source;
        k->facts_text = facts_text;
        facts_text = NULL;
        list_entries(k);
out:
        free(checked);
        free(facts_text);
        free(log);
        cube__sandbox_remove(dir);
        return e;
}

/* The facts of a kernel built before are kept beside its artifact
 * (KEY.facts, with its digest, trusted as an artifact is: cache.c), so that
 * a kernel loaded from the disk cache needs no front end on its first
 * launch. */
bool cube__kernel_facts_load(cube__kernel *k)
{
        cube__server *srv = k->server;
        char name[CUBE__ARTIFACT_NAME];
        uint64_t bytes = 0;
        int fd;

        snprintf(name, sizeof(name), "%.64s.facts", k->program);
        if ((fd = cube__artifact_open(&srv->disk_cache, name, &bytes)) < 0) {
                if (fd != -ENOENT)
                        cube__log(CUBE__LOG_WARNING, "kernel %s (%.12s): the cached facts %s "
                                  "are not what was written beside the artifact (planted or "
                                  "altered); the front end reads the source again", k->entry,
                                  k->hash, name);
                return false;
        }
        size_t len = bytes > 64 ? (size_t) (bytes - 64) : 0;
        char *text = len <= (16u << 20) ? malloc(len + 1) : NULL;
        bool ok = text && pread(fd, text, len, 0) == (ssize_t) len;
        close(fd);
        if (!ok) {
                free(text);
                return false;
        }
        text[len] = '\0';
        cube__fe_facts *facts = cube__fe_facts_parse(text, k->entry);
        if (!facts) {
                free(text);
                return false;
        }
        cube__fe_facts_free(k->facts);
        free(k->facts_text);
        k->facts = facts;
        k->facts_text = text;
        list_entries(k);
        return true;
}

void cube__kernel_facts_store(cube__kernel *k)
{
        cube__server *srv = k->server;
        char name[CUBE__ARTIFACT_NAME];
        int fd;

        if (!k->facts_text)
                return;
        snprintf(name, sizeof(name), "%.64s.facts", k->program);
        fd = openat(srv->disk_cache.fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC |
                    O_NOFOLLOW, 0600);
        if (fd < 0)
                return;
        size_t len = strlen(k->facts_text);
        bool ok = write(fd, k->facts_text, len) == (ssize_t) len;
        if (close(fd) < 0 || !ok) {
                (void) unlinkat(srv->disk_cache.fd, name, 0);
                return;
        }
        if ((fd = cube__artifact_seal(&srv->disk_cache, name, k->entries, k->source, NULL)) >= 0)
                close(fd);
}
