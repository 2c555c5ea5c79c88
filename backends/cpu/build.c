/*
 * build.c - kernels for the CPU device: compiled in a sandbox, then loaded.
 *
 * Compiling is a short-lived cube-device --build, under limits of its own
 * (CPU time, address space, output size: see build below), in a private
 * directory beside the artifact, so what a source makes the compiler do
 * never happens in cubed. Loading reads the artifact back and sends its
 * program binaries to the device process on the control socket (queue.h's
 * CUBE__MSG_LOAD).
 */
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu.h"
#include "errors.h"
#include "io.h"
#include "sandbox.h"

#define COMPILE_AS_MB 4096
#define COMPILE_FSIZE_MB 256

/* Build failures that say nothing about the kernel: the compiler, the host
 * or the cache directory let it down. They are defects, never refusals, and
 * the core compiles again at a later launch. */
cube_error *cube__cpu_defect(cube_error_kind kind, const char *fmt, ...)
{
        char reason[4096];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(reason, sizeof(reason), fmt, ap);
        va_end(ap);
        if (kind == CUBE_IO_UNKNOWN)
                return cube__err_wrap(CUBE_SERVER_IO, cube__err_text(kind, "%s", reason));
        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(kind, "%s", reason));
}

static char *read_text(const char *path, size_t max)
{
        char *buf = calloc(1, max + 1);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n;

        if (fd >= 0 && buf && (n = read(fd, buf, max)) > 0)
                buf[n] = '\0';
        if (fd >= 0)
                close(fd);
        return buf;
}

static int write_file(const char *path, const char *text)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), r;

        if (fd < 0)
                return -errno;
        r = cube__write_all(fd, text, strlen(text));
        if (close(fd) < 0 && r == 0)
                r = -errno;
        return r;
}

/* Says what a builder that did not exit 0 means. The rule: a build stopped
 * by its own limits (CPU time, file size, address space) is the source's
 * doing, a refusal; one that died otherwise, or outlived its wall-clock
 * limit without using its CPU time (starved, not runaway), is a cube__cpu_defect. */
static cube_error *judge(const cube__kernel_desc *desc, int status, const struct rusage *ru,
                         bool wall_timeout, unsigned cpu_s, const char *log)
{
        double cpu = (double) ru->ru_utime.tv_sec + (double) ru->ru_stime.tv_sec +
                     ((double) ru->ru_utime.tv_usec + (double) ru->ru_stime.tv_usec) / 1e6;
        bool ran_out = cpu + 0.5 >= (double) cpu_s;
        int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;

        if (wall_timeout && !ran_out)
                return cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "building kernel '%s' outlived its "
                                        "wall-clock limit after only %.1f s of CPU time (the "
                                        "machine is starved); a later launch tries again",
                                        desc->entry, cpu);
        if (wall_timeout || ((sig == SIGXCPU || sig == SIGKILL) && ran_out))
                return cube__err_text(CUBE_COMPILATION_GENERIC, "building kernel '%s' ran past "
                                      "its CPU time limit of %u s and was stopped", desc->entry,
                                      cpu_s);
        if (sig == SIGXFSZ)
                return cube__err_text(CUBE_COMPILATION_GENERIC, "building kernel '%s' wrote past "
                                      "its output limit of %u MiB and was stopped", desc->entry,
                                      COMPILE_FSIZE_MB);
        if (sig && log && (strstr(log, "out of memory") || strstr(log, "bad_alloc") ||
                           strstr(log, "Cannot allocate memory")))
                return cube__err_text(CUBE_COMPILATION_GENERIC, "building kernel '%s' ran past "
                                      "its address-space limit of %u MiB and was stopped",
                                      desc->entry, COMPILE_AS_MB);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 10)
                return cube__err_text(CUBE_COMPILATION_GENERIC, "the OpenCL compiler could not "
                                      "build kernel '%s':\n%s", desc->entry, log ? log : "");
        if (sig)
                return cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "the kernel compiler died of %s "
                                        "while building kernel '%s'; a later launch tries "
                                        "again:\n%s", cube__cpu_signal_name(sig), desc->entry,
                                        log ? log : "");
        return cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "the kernel compiler failed while building "
                                "kernel '%s' (exit status %d); a later launch tries again:\n%s",
                                desc->entry, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                                log ? log : "");
}

/* Runs the builder in a private directory beside the artifact, waits for it
 * within its wall-clock limit, and puts what it built at artifact_path. */
static cube_error *build(cube__device *d, const cube__kernel_desc *desc, const char *translated,
                         const char *artifact_path)
{
        unsigned cpu_s = d->config.compile_cpu_s ? d->config.compile_cpu_s : 60;
        char dir[PATH_MAX], path[PATH_MAX + 16];
        const char *slash = strrchr(artifact_path, '/');
        int r;
        cube_error *e = NULL;

        snprintf(dir, sizeof(dir), "%.*s/.build-XXXXXX", slash ? (int) (slash - artifact_path) : 1,
                 slash ? artifact_path : ".");
        if (!mkdtemp(dir))
                return cube__cpu_defect(CUBE_IO_UNKNOWN, "cannot create a build directory beside "
                                        "%s: %s; check the cache directory", artifact_path,
                                        strerror(errno));
        snprintf(path, sizeof(path), "%s/kernel.cl", dir);
        r = write_file(path, translated);
        snprintf(path, sizeof(path), "%s/entry", dir);
        if (r == 0)
                r = write_file(path, desc->entry);
        if (r < 0) {
                e = cube__cpu_defect(CUBE_IO_UNKNOWN, "cannot write the kernel source into %s: "
                                     "%s; check the cache directory", dir, strerror(-r));
                goto out;
        }
        cube__sandbox_result res;
        r = cube__sandbox_run(d->helper, "--build", dir, cpu_s, COMPILE_AS_MB, COMPILE_FSIZE_MB,
                              &res);
        if (r != 0) {
                e = cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "cannot run the kernel compiler (%s): %s",
                                     d->helper, strerror(r));
                goto out;
        }
        int status = res.status;
        bool wall_timeout = res.wall_timeout;
        struct rusage ru = res.ru;
        if (wall_timeout || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                char *log, *err;
                snprintf(path, sizeof(path), "%s/log", dir);
                log = read_text(path, 16 * 1024);
                snprintf(path, sizeof(path), "%s/stderr", dir);
                err = read_text(path, 4 * 1024);
                if (log && err && err[0] && !log[0]) {
                        free(log);
                        log = err;
                        err = NULL;
                }
                e = judge(desc, status, &ru, wall_timeout, cpu_s, log);
                free(log);
                free(err);
                goto out;
        }
        snprintf(path, sizeof(path), "%s/artifact", dir);
        if (rename(path, artifact_path) < 0)
                e = cube__cpu_defect(CUBE_IO_UNKNOWN, "cannot store the compiled kernel at %s: "
                                     "%s; check the cache directory", artifact_path,
                                     strerror(errno));
out:
        cube__cpu_rm_tree(dir);
        return e;
}

cube_error *cube__cpu_compile(cube__device *d, const cube__kernel_desc *desc, const char *path)
{
        char *translated = NULL;
        cube_error *e;

        if ((e = cube__cpu_translate(desc, &translated)))
                return e;
        while (sem_wait(&d->compiles) < 0 && errno == EINTR)
                ;
        e = build(d, desc, translated, path);
        sem_post(&d->compiles);
        free(translated);
        return e;
}

cube_error *cube__cpu_load(cube__device *d, const cube__kernel_desc *desc, const char *path,
                           cube__module **ret_module, uint32_t *ret_shared_bytes)
{
        cube__artifact_head head;
        cube__module *m;
        cube__msg msg = { .type = CUBE__MSG_LOAD };
        cube__msg_reply rep = { 0 };
        char *payload = NULL, reason[1024] = "";
        size_t elen = strlen(desc->entry);
        int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;

        if (fd < 0)
                return cube__cpu_defect(CUBE_IO_UNKNOWN, "cannot open %s: %s", path,
                                        strerror(errno));
        if (cube__read_all(fd, &head, sizeof(head)) < 0 ||
            strncmp(head.magic, CUBE__ARTIFACT_MAGIC, sizeof(head.magic)) != 0 ||
            head.binary_bytes == 0 || head.binary_bytes > (128u << 20)) {
                close(fd);
                return cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "%s is not a kernel the CPU device "
                                        "built", path);
        }
        payload = malloc(elen + 1 + head.binary_bytes);
        if (!payload || cube__read_all(fd, payload + elen + 1, head.binary_bytes) < 0) {
                close(fd);
                free(payload);
                return cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "cannot read the kernel binary in %s",
                                        path);
        }
        close(fd);
        memcpy(payload, desc->entry, elen + 1);
        if (!(m = calloc(1, sizeof(*m)))) {
                free(payload);
                return cube__cpu_defect(CUBE_LAUNCH_OUT_OF_MEMORY, "out of host memory loading a "
                                        "kernel");
        }
        msg.len = (uint32_t) (elen + 1 + head.binary_bytes);
        msg.n_buffers = desc->n_buffers;
        pthread_mutex_lock(&d->control_lock);
        msg.id = m->id = d->next_module++;
        if (atomic_load(&d->dead))
                r = -EPIPE;
        if (r == 0 && (r = cube__write_all(d->control_fd, &msg, sizeof(msg))) == 0 &&
            (r = cube__write_all(d->control_fd, payload, msg.len)) == 0)
                r = cube__cpu_read_reply(d, &rep, reason, sizeof(reason));
        pthread_mutex_unlock(&d->control_lock);
        free(payload);
        if (r < 0 || rep.status != 0) {
                free(m);
                if (r < 0)
                        return cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "the CPU device did not load "
                                                "kernel '%s': its process is gone", desc->entry);
                return cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "the CPU device could not load kernel "
                                        "'%s' from %s: %s", desc->entry, path, reason);
        }
        m->n_buffers = desc->n_buffers;
        m->facts = desc->facts;
        *ret_shared_bytes = head.shared_bytes > UINT32_MAX ? UINT32_MAX : (uint32_t) head.shared_bytes;
        *ret_module = m;
        return NULL;
}

void cube__cpu_unload(cube__device *d, cube__module *m)
{
        if (!m)
                return;
        (void) cube__cpu_send_notice(d, &(cube__msg) { .type = CUBE__MSG_UNLOAD, .id = m->id },
                                     NULL);
        free(m);
}
