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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu.h"
#include "errors.h"
#include "io.h"
#include "sandbox.h"

/* What one build may take: the defaults when the daemon names none. */
typedef struct build_limits {
        unsigned cpu_s;
        unsigned memory_mb;
        unsigned output_mb;
} build_limits;

static build_limits limits_of(const cube__device *d)
{
        const cube__device_config *c = &d->config;

        return (build_limits) {
                .cpu_s = c->compile_cpu_s ? c->compile_cpu_s : 60,
                .memory_mb = c->compile_memory ? (unsigned) (c->compile_memory >> 20) : 4096,
                .output_mb = c->compile_output ? (unsigned) (c->compile_output >> 20) : 128,
        };
}

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

/* Takes every mention of the private build directory out of what the
 * compiler said: the requester learns its source's line, not our paths. */
static void scrub(char *text, const char *dir)
{
        size_t n = strlen(dir);
        char *p;

        while (text && n && (p = strstr(text, dir))) {
                size_t cut = n + (p[n] == '/');
                memmove(p, p + cut, strlen(p + cut) + 1);
        }
}

/* Whether the build left a file as large as its output limit: a write past
 * it failed there (SIGXFSZ, or EFBIG where the compiler catches the signal). */
static bool reached_output_limit(const char *dir, uint64_t limit, int depth)
{
        DIR *dp = opendir(dir);
        struct dirent *de;
        bool reached = false;

        if (!dp)
                return false;
        while (!reached && (de = readdir(dp))) {
                char path[PATH_MAX];
                struct stat st;
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                if (lstat(path, &st) < 0)
                        continue;
                if (S_ISREG(st.st_mode))
                        reached = (uint64_t) st.st_size >= limit;
                else if (S_ISDIR(st.st_mode) && depth < 4)
                        reached = reached_output_limit(path, limit, depth + 1);
        }
        closedir(dp);
        return reached;
}

static bool says_out_of_memory(const char *log)
{
        return log && (strstr(log, "out of memory") || strstr(log, "bad_alloc") ||
                       strstr(log, "Cannot allocate memory"));
}

/* Says what a builder that did not exit 0 means. The rule: a build stopped
 * by its own limits (CPU time, output size, address space) is the source's
 * doing, a refusal naming the limit; one that outlived its wall-clock limit
 * without using its CPU time (starved, not runaway) is a cube__cpu_defect.
 * A compiler that died otherwise may have died of this source or of itself:
 * *ret_death says how it died, and the caller finds out which. */
static cube_error *judge(const cube__kernel_desc *desc, const build_limits *lim, int status,
                         const struct rusage *ru, bool wall_timeout, bool output_full,
                         const char *log, char *ret_death, size_t death_len)
{
        double cpu = (double) ru->ru_utime.tv_sec + (double) ru->ru_stime.tv_sec +
                     ((double) ru->ru_utime.tv_usec + (double) ru->ru_stime.tv_usec) / 1e6;
        bool ran_out = cpu + 0.5 >= (double) lim->cpu_s;
        int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;

        if (wall_timeout && !ran_out)
                return cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "building kernel '%s' outlived its "
                                        "wall-clock limit after only %.1f s of CPU time (the "
                                        "machine is starved); a later launch tries again",
                                        desc->entry, cpu);
        if (wall_timeout || ((sig == SIGXCPU || sig == SIGKILL) && ran_out))
                return cube__err_text(CUBE_COMPILATION_GENERIC, "building kernel '%s' ran past "
                                      "its CPU time limit of %u s (compile-limit) and was "
                                      "stopped", desc->entry, lim->cpu_s);
        if (sig == SIGXFSZ || output_full)
                return cube__err_text(CUBE_COMPILATION_GENERIC, "building kernel '%s' wrote past "
                                      "its output limit of %u MiB (compile-output) and was "
                                      "stopped", desc->entry, lim->output_mb);
        if (says_out_of_memory(log))
                return cube__err_text(CUBE_COMPILATION_GENERIC, "building kernel '%s' ran past "
                                      "its address-space limit of %u MiB (compile-memory) and "
                                      "was stopped", desc->entry, lim->memory_mb);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 10)
                return cube__err_text(CUBE_COMPILATION_GENERIC, "the OpenCL compiler could not "
                                      "build kernel '%s':\n%s", desc->entry, log ? log : "");
        if (sig)
                snprintf(ret_death, death_len, "died of %s", cube__cpu_signal_name(sig));
        else
                snprintf(ret_death, death_len, "failed (exit status %d)",
                         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "the kernel compiler %s while building "
                                "kernel '%s'; a later launch tries again:\n%s", ret_death,
                                desc->entry, log ? log : "");
}

/* Runs the builder in a private directory beside the artifact, waits for it
 * within its wall-clock limit, and puts what it built at artifact_path: the
 * generic work-group functions, and with shape those specialised for it. A
 * compiler that died says how in ret_death (else it is left empty). */
static cube_error *build(cube__device *d, const cube__kernel_desc *desc, const char *translated,
                         const uint32_t *shape, const char *artifact_path,
                         const atomic_bool *abandon, char *ret_death, size_t death_len)
{
        build_limits lim = limits_of(d);
        char dir[PATH_MAX], path[PATH_MAX + 16];
        const char *slash = strrchr(artifact_path, '/');
        int r;
        cube_error *e = NULL;

        ret_death[0] = '\0';
        snprintf(dir, sizeof(dir), "%.*s/.build-XXXXXX", slash ? (int) (slash - artifact_path) : 1,
                 slash ? artifact_path : ".");
        if (!mkdtemp(dir))
                return cube__cpu_defect(CUBE_IO_UNKNOWN, "cannot create a build directory in "
                                        "the kernel cache: %s; check the cache directory",
                                        strerror(errno));
        r = cube__sandbox_write(dir, "kernel.cl", translated);
        if (r == 0)
                r = cube__sandbox_write(dir, "entry", desc->entry);
        if (r == 0 && shape) {
                char text[48];
                snprintf(text, sizeof(text), "%u %u %u", shape[0], shape[1], shape[2]);
                r = cube__sandbox_write(dir, "shape", text);
        }
        if (r < 0) {
                e = cube__cpu_defect(CUBE_IO_UNKNOWN, "cannot write the kernel source into a "
                                     "build directory in the kernel cache: %s; check the cache "
                                     "directory", strerror(-r));
                goto out;
        }
        cube__sandbox_result res;
        r = cube__sandbox_run(d->helper, "--build", dir, lim.cpu_s, lim.memory_mb, lim.output_mb,
                              abandon, &res);
        if (r != 0) {
                e = cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "cannot run the kernel compiler (%s): %s",
                                     d->helper, strerror(r));
                goto out;
        }
        if (res.abandoned) {
                e = cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "the build was abandoned: the daemon "
                                     "is stopping");
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
                if (err && says_out_of_memory(err) && !says_out_of_memory(log)) {
                        free(log);
                        log = err;
                        err = NULL;
                }
                scrub(log, dir);
                e = judge(desc, &lim, status, &ru, wall_timeout,
                          reached_output_limit(dir, (uint64_t) lim.output_mb << 20, 0), log,
                          ret_death, death_len);
                free(log);
                free(err);
                goto out;
        }
        snprintf(path, sizeof(path), "%s/artifact", dir);
        if (rename(path, artifact_path) < 0)
                e = cube__cpu_defect(CUBE_IO_UNKNOWN, "cannot store the compiled kernel in the "
                                     "kernel cache: %s; check the cache directory",
                                     strerror(errno));
out:
        cube__sandbox_remove(dir);
        return e;
}

/* Whether the compiler builds a kernel that asks nothing of it: when it
 * does, a compiler that died on another source died of that source. */
static bool compiler_builds(cube__device *d, const char *artifact_path)
{
        static const cube__kernel_desc probe = {
                /* What the front end would have written, without the guards. */
                .source = "__kernel void cube__k_cube_probe(__global uint *out)\n"
                          "{\n        out[0] = 1;\n}\n",
                .entry = "cube_probe",
                .n_buffers = 1,
        };
        char path[PATH_MAX], death[64];
        char *translated = NULL;
        cube_error *e;

        snprintf(path, sizeof(path), "%s.probe", artifact_path);
        if ((e = cube__cpu_translate(&probe, &translated))) {
                cube_error_free(e);
                return false;
        }
        e = build(d, &probe, translated, NULL, path, NULL, death, sizeof(death));
        free(translated);
        (void) unlink(path);
        cube_error_free(e);
        return e == NULL;
}

/* Builds desc at path in a build slot of the device's: generically, or
 * with shape for cubes of that dimension, until *abandon is set. */
static cube_error *compile(cube__device *d, const cube__kernel_desc *desc, const uint32_t *shape,
                           const char *path, const atomic_bool *abandon)
{
        char *translated = NULL, death[64];
        cube_error *e;

        if ((e = cube__cpu_translate(desc, &translated)))
                return e;
        while (sem_wait(&d->compiles) < 0 && errno == EINTR)
                ;
        e = build(d, desc, translated, shape, path, abandon, death, sizeof(death));
        if (e && death[0] && !shape && compiler_builds(d, path)) {
                build_limits lim = limits_of(d);
                cube_error_free(e);
                e = cube__err_text(CUBE_COMPILATION_GENERIC, "building kernel '%s' made the "
                                   "kernel compiler %s; it builds other kernels, so this source "
                                   "is what it cannot build within the build's limits (%u s of "
                                   "CPU time, compile-limit; %u MiB of address space, "
                                   "compile-memory; %u MiB of output, compile-output)",
                                   desc->entry, death, lim.cpu_s, lim.memory_mb, lim.output_mb);
        }
        sem_post(&d->compiles);
        free(translated);
        return e;
}

cube_error *cube__cpu_compile(cube__device *d, const cube__kernel_desc *desc, const char *path)
{
        return compile(d, desc, NULL, path, NULL);
}

cube_error *cube__cpu_compile_shape(cube__device *d, const cube__kernel_desc *desc,
                                   const uint32_t dim[3], const char *path,
                                   const atomic_bool *abandon)
{
        return compile(d, desc, dim, path, abandon);
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
                return cube__cpu_defect(CUBE_IO_UNKNOWN, "cannot open the compiled kernel '%s': "
                                        "%s", desc->entry, strerror(errno));
        if (cube__read_all(fd, &head, sizeof(head)) < 0 ||
            strncmp(head.magic, CUBE__ARTIFACT_MAGIC, sizeof(head.magic)) != 0 ||
            head.binary_bytes == 0 || head.binary_bytes > (128u << 20)) {
                close(fd);
                return cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "the compiled kernel '%s' is not one "
                                        "the CPU device built", desc->entry);
        }
        payload = malloc(elen + 1 + head.binary_bytes);
        if (!payload || cube__read_all(fd, payload + elen + 1, head.binary_bytes) < 0) {
                close(fd);
                free(payload);
                return cube__cpu_defect(CUBE_LAUNCH_UNKNOWN, "cannot read the binary of the "
                                        "compiled kernel '%s'", desc->entry);
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
                                        "'%s': %s", desc->entry, reason);
        }
        /* The device answers the shared memory the entry point declares. */
        unsigned long long shared = strtoull(reason, NULL, 10);
        m->n_buffers = desc->n_buffers;
        m->facts = desc->facts;
        *ret_shared_bytes = shared > UINT32_MAX ? UINT32_MAX : (uint32_t) shared;
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
