/*
 * jit.c - kernels for the CPU backend: the prelude, the compiler run, and
 * loading what it built.
 *
 * A kernel is compiled by the system C compiler into a shared object, which is
 * then loaded with dlopen. The compiler is spawned with posix_spawn (a fork of
 * a large daemon costs twice as much) and is given a time limit, so a hostile
 * source can neither crash nor wedge the daemon: the worst it gets is a
 * CompilationError carrying the compiler's own words.
 *
 * Shared memory is thread-local storage: every unit of a cube runs on the one
 * thread that runs the cube, so a SHARED variable is shared by exactly that
 * cube's units, and each thread of the pool has its own copy for its cube.
 * Its size is read from the object's symbol table once it is built.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <elf.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"
#include "errors.h"

#define COMPILE_TIMEOUT_S 60
#define LOG_MAX (16 * 1024)

/* Flags every kernel is built with; part of the cache key. */
static const char *const cc_flags[] = {
        "-std=gnu11", "-O3", "-march=native", "-fPIC", "-shared", "-pthread",
};

/* The CPU prelude: the dialect of docs/KERNELS.md over a per-unit record the
 * executor fills in. INFO carries the record as a hidden parameter, so a
 * kernel's builtins read a local; functions the kernel calls read the same
 * record through a thread-local, which sync_cube() puts back after other
 * units ran. */
static const char prelude[] =
"#include <stdbool.h>\n"
"#include <stddef.h>\n"
"#include <stdint.h>\n"
"#include <math.h>\n"
"typedef struct cube__unit {\n"
"        uint32_t unit_pos[3], cube_pos[3], cube_dim[3], cube_count[3];\n"
"        uint32_t metadata_offset, dynamic_offset;\n"
"        void (*sync)(void *ctx);\n"
"        void *sync_ctx;\n"
"} cube__unit;\n"
"static __thread const cube__unit *cube__u;\n"
"static inline void cube__set_unit(const cube__unit *u) { cube__u = u; }\n"
"#define KERNEL static\n"
"#define SHARED static __thread\n"
"#define INFO const uint64_t *cube__info, const cube__unit *cube__u\n"
"#define UNIT_POS_X (cube__u->unit_pos[0])\n"
"#define UNIT_POS_Y (cube__u->unit_pos[1])\n"
"#define UNIT_POS_Z (cube__u->unit_pos[2])\n"
"#define CUBE_POS_X (cube__u->cube_pos[0])\n"
"#define CUBE_POS_Y (cube__u->cube_pos[1])\n"
"#define CUBE_POS_Z (cube__u->cube_pos[2])\n"
"#define CUBE_DIM_X (cube__u->cube_dim[0])\n"
"#define CUBE_DIM_Y (cube__u->cube_dim[1])\n"
"#define CUBE_DIM_Z (cube__u->cube_dim[2])\n"
"#define CUBE_COUNT_X (cube__u->cube_count[0])\n"
"#define CUBE_COUNT_Y (cube__u->cube_count[1])\n"
"#define CUBE_COUNT_Z (cube__u->cube_count[2])\n"
"#define ABSOLUTE_POS_X (CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X)\n"
"#define ABSOLUTE_POS_Y (CUBE_POS_Y * CUBE_DIM_Y + UNIT_POS_Y)\n"
"#define ABSOLUTE_POS_Z (CUBE_POS_Z * CUBE_DIM_Z + UNIT_POS_Z)\n"
"#define UNIT_POS (UNIT_POS_X + UNIT_POS_Y * CUBE_DIM_X + UNIT_POS_Z * CUBE_DIM_X * CUBE_DIM_Y)\n"
"#define CUBE_DIM (CUBE_DIM_X * CUBE_DIM_Y * CUBE_DIM_Z)\n"
"#define CUBE_POS (CUBE_POS_X + CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_Z * CUBE_COUNT_X * CUBE_COUNT_Y)\n"
"#define CUBE_COUNT (CUBE_COUNT_X * CUBE_COUNT_Y * CUBE_COUNT_Z)\n"
"#define ABSOLUTE_POS ((uint64_t) CUBE_POS * CUBE_DIM + UNIT_POS)\n"
"#define sync_cube() do { const cube__unit *cube__self = cube__u; \\\n"
"        cube__self->sync(cube__self->sync_ctx); cube__set_unit(cube__self); } while (0)\n"
"#define SCALAR(type, word, i) (((const type *) (cube__info + (word)))[i])\n"
"#define META_U32(i) (((const uint32_t *) (cube__info + cube__u->metadata_offset))[i])\n"
"#define DYN_U32(i) (((const uint32_t *) (cube__info + cube__u->dynamic_offset))[i])\n"
"#define BUFFER_LEN(b) META_U32(b)\n";

static pthread_once_t target_once = PTHREAD_ONCE_INIT;
static char target[256];

/* The first line a command prints, or "" (startup only). */
static void first_line(const char *cmd, char *buf, size_t cap)
{
        FILE *f = popen(cmd, "r");

        buf[0] = '\0';
        if (!f)
                return;
        if (fgets(buf, (int) cap, f))
                buf[strcspn(buf, "\n")] = '\0';
        pclose(f);
}

/* Kernels are built with -march=native, so they depend on the processor's
 * instruction set: a digest of its model and feature flags joins the key. */
static uint64_t cpu_digest(void)
{
        FILE *f = fopen("/proc/cpuinfo", "r");
        char line[4096];
        uint64_t h = 1469598103934665603ull;

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f)) {
                if (strncmp(line, "model name", 10) != 0 && strncmp(line, "flags", 5) != 0)
                        continue;
                for (const char *p = line; *p; p++)
                        h = (h ^ (uint8_t) *p) * 1099511628211ull;
                if (strncmp(line, "flags", 5) == 0)
                        break;          /* the first processor says it for all */
        }
        fclose(f);
        return h;
}

static void find_target(void)
{
        char version[64], machine[64];
        size_t n;

        first_line("cc -dumpfullversion -dumpversion 2>/dev/null", version, sizeof(version));
        first_line("cc -dumpmachine 2>/dev/null", machine, sizeof(machine));
        n = (size_t) snprintf(target, sizeof(target), "cc %s %s cpu %016llx",
                              *version ? version : "unknown", *machine ? machine : "unknown",
                              (unsigned long long) cpu_digest());
        for (size_t i = 0; i < sizeof(cc_flags) / sizeof(cc_flags[0]) && n < sizeof(target); i++)
                n += (size_t) snprintf(target + n, sizeof(target) - n, " %s", cc_flags[i]);
}

const char *cube__cpu_target(void)
{
        pthread_once(&target_once, find_target);
        return target;
}

static int write_all(int fd, const char *p, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return -errno;
                p += w;
                n -= (size_t) w;
        }
        return 0;
}

/* Writes the prelude, the kernel, and the two entry points the executor
 * calls: one unit at a time (for kernels with barriers) and a whole cube in
 * one loop (the fast path, where the compiler can inline the kernel). */
static int write_source(const char *path, const cube__kernel_desc *desc)
{
        char head[128], call[64];
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int r = 0;

        if (fd < 0)
                return -errno;
        snprintf(head, sizeof(head), "#line 1 \"%s.c\"\n", desc->entry);
        r |= write_all(fd, prelude, strlen(prelude));
        r |= write_all(fd, head, strlen(head));
        r |= write_all(fd, desc->source, strlen(desc->source));
        r |= write_all(fd, "\n#line 1 \"cube-entry.c\"\n", 24);

        /* NAME(b[0], ..., b[n-1], info) */
        char *args = malloc((size_t) desc->n_buffers * 16 + 16);
        size_t len = 0;
        if (!args) {
                close(fd);
                return -ENOMEM;
        }
        for (uint32_t i = 0; i < desc->n_buffers; i++)
                len += (size_t) sprintf(args + len, "b[%u], ", i);
        strcpy(args + len, "info, ");
        snprintf(call, sizeof(call), "%s", desc->entry);

        dprintf(fd,
                "void cube__unit_entry(const cube__unit *u, void *const *b, const uint64_t *info);\n"
                "void cube__unit_entry(const cube__unit *u, void *const *b, const uint64_t *info)\n"
                "{\n        (void) b;\n        cube__set_unit(u);\n        %s(%su);\n}\n"
                "void cube__cube_entry(cube__unit *u, void *const *b, const uint64_t *info);\n"
                "void cube__cube_entry(cube__unit *u, void *const *b, const uint64_t *info)\n"
                "{\n        cube__unit local = *u;\n"
                "        (void) b;\n"
                "        cube__set_unit(&local);\n"
                "        for (uint32_t z = 0; z < local.cube_dim[2]; z++)\n"
                "                for (uint32_t y = 0; y < local.cube_dim[1]; y++)\n"
                "                        for (uint32_t x = 0; x < local.cube_dim[0]; x++) {\n"
                "                                local.unit_pos[0] = x;\n"
                "                                local.unit_pos[1] = y;\n"
                "                                local.unit_pos[2] = z;\n"
                "                                %s(%s&local);\n"
                "                        }\n}\n", call, args, call, args);
        free(args);
        if (close(fd) < 0 && r == 0)
                r = -errno;
        return r;
}

static char *read_log(const char *path)
{
        char *buf = calloc(1, LOG_MAX + 1);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n;

        if (!buf || fd < 0) {
                if (fd >= 0)
                        close(fd);
                return buf;
        }
        n = read(fd, buf, LOG_MAX);
        if (n > 0)
                buf[n] = '\0';
        close(fd);
        return buf;
}

/* Build failures that say nothing about the kernel: the compiler, the host
 * or the cache directory let it down. They are defects, never refusals (an
 * autotuner must not drop a good kernel over them), and the core compiles
 * again at a later launch. */
static cube_error *defect(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static cube_error *defect(const char *fmt, ...)
{
        char reason[4096];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(reason, sizeof(reason), fmt, ap);
        va_end(ap);
        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN, "%s",
                                                                 reason));
}

static cube_error *host_oom(const char *what)
{
        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_OUT_OF_MEMORY,
                                                                 "out of host memory %s", what));
}

static cube_error *cache_io(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static cube_error *cache_io(const char *fmt, ...)
{
        char reason[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(reason, sizeof(reason), fmt, ap);
        va_end(ap);
        return cube__err_wrap(CUBE_SERVER_IO, cube__err_text(CUBE_IO_UNKNOWN, "%s; check the "
                                                             "cache directory", reason));
}

/* Whether a compiler that did not succeed failed on its own account (killed,
 * crashed, out of memory or disk) rather than on the source: gcc exits 4 on
 * an internal compiler error. */
static bool compiler_failed(int status, const char *log)
{
        static const char *const host[] = {
                "internal compiler error", "virtual memory exhausted", "Cannot allocate memory",
                "No space left on device", "Killed signal terminated program",
        };

        if (!WIFEXITED(status) || WEXITSTATUS(status) == 4)
                return true;
        for (size_t i = 0; log && i < sizeof(host) / sizeof(host[0]); i++)
                if (strstr(log, host[i]))
                        return true;
        return false;
}

cube_error *cube__cpu_compile(const cube__kernel_desc *desc, const char *artifact_path)
{
        extern char **environ;
        size_t plen = strlen(artifact_path) + 16;
        char *src = malloc(plen), *obj = malloc(plen), *log = malloc(plen);
        const char *argv[32];
        int n = 0, status = 0, r;
        posix_spawn_file_actions_t fa;
        pid_t pid;
        cube_error *e = NULL;

        if (!src || !obj || !log) {
                e = host_oom("compiling a kernel");
                goto out;
        }
        snprintf(src, plen, "%s.tmp.c", artifact_path);
        snprintf(obj, plen, "%s.tmp", artifact_path);
        snprintf(log, plen, "%s.log", artifact_path);
        if ((r = write_source(src, desc)) < 0) {
                e = cache_io("cannot write the kernel source to %s: %s", src, strerror(-r));
                goto out;
        }

        argv[n++] = "cc";
        for (size_t i = 0; i < sizeof(cc_flags) / sizeof(cc_flags[0]); i++)
                argv[n++] = cc_flags[i];
        argv[n++] = "-o";
        argv[n++] = obj;
        argv[n++] = src;
        argv[n++] = "-lm";
        argv[n] = NULL;

        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        r = posix_spawnp(&pid, "cc", &fa, NULL, (char *const *) argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0) {
                e = defect("cannot run the C compiler (cc): %s; install gcc, or put cc on "
                           "cubed's PATH", strerror(r));
                goto out;
        }

        struct timespec start, now;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (;;) {
                pid_t w = waitpid(pid, &status, WNOHANG);
                if (w == pid)
                        break;
                if (w < 0 && errno != EINTR) {
                        status = -1;
                        break;
                }
                clock_gettime(CLOCK_MONOTONIC, &now);
                if (now.tv_sec - start.tv_sec > COMPILE_TIMEOUT_S) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &status, 0);
                        e = defect("compiling kernel '%s' took longer than %d s; the compiler "
                                   "was stopped, and a later launch tries again", desc->entry,
                                   COMPILE_TIMEOUT_S);
                        goto out;
                }
                struct timespec ms = { 0, 500 * 1000 };
                nanosleep(&ms, NULL);
        }

        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                char *text = read_log(log);
                if (compiler_failed(status, text))
                        e = defect("the C compiler failed while building kernel '%s' (%s %d); "
                                   "a later launch tries again:\n%s", desc->entry,
                                   WIFSIGNALED(status) ? "signal" : "exit status",
                                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                                   text ? text : "");
                else
                        e = cube__err_text(CUBE_COMPILATION_GENERIC, "the C compiler could not "
                                           "build kernel '%s':\n%s", desc->entry,
                                           text ? text : "");
                free(text);
                goto out;
        }
        if (rename(obj, artifact_path) < 0)
                e = cache_io("cannot store the compiled kernel at %s: %s", artifact_path,
                             strerror(errno));
out:
        if (src) {
                unlink(src);
                unlink(obj);
                unlink(log);
        }
        free(src);
        free(obj);
        free(log);
        return e;
}

/* The bytes of SHARED memory a kernel object declares: the sizes of its
 * thread-local symbols, the prelude's own unit pointer left out. Read from the
 * object's symbol table, so alignment padding is not counted as requested. */
static int shared_bytes_of(const char *path, uint64_t *ret)
{
        FILE *f = fopen(path, "rb");
        uint8_t *img = NULL;
        long len;
        int r = -EINVAL;

        if (!f)
                return -errno;
        if (fseek(f, 0, SEEK_END) < 0 || (len = ftell(f)) < (long) sizeof(Elf64_Ehdr) ||
            fseek(f, 0, SEEK_SET) < 0 || !(img = malloc((size_t) len)) ||
            fread(img, 1, (size_t) len, f) != (size_t) len)
                goto out;

        const Elf64_Ehdr *eh = (const Elf64_Ehdr *) img;
        if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
            eh->e_shentsize != sizeof(Elf64_Shdr) ||
            eh->e_shoff + (uint64_t) eh->e_shnum * sizeof(Elf64_Shdr) > (uint64_t) len)
                goto out;
        const Elf64_Shdr *sh = (const Elf64_Shdr *) (img + eh->e_shoff);
        for (unsigned i = 0; i < eh->e_shnum; i++) {
                if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum)
                        continue;
                const Elf64_Shdr *str = &sh[sh[i].sh_link];
                if (sh[i].sh_offset + sh[i].sh_size > (uint64_t) len ||
                    str->sh_offset + str->sh_size > (uint64_t) len)
                        goto out;
                const Elf64_Sym *sym = (const Elf64_Sym *) (img + sh[i].sh_offset);
                uint64_t total = 0;
                for (size_t j = 0; j < sh[i].sh_size / sizeof(Elf64_Sym); j++) {
                        if (ELF64_ST_TYPE(sym[j].st_info) != STT_TLS || sym[j].st_name >= str->sh_size)
                                continue;
                        const char *name = (const char *) img + str->sh_offset + sym[j].st_name;
                        if (strnlen(name, str->sh_size - sym[j].st_name) == str->sh_size - sym[j].st_name)
                                continue;
                        if (strcmp(name, "cube__u") != 0)
                                total += sym[j].st_size;
                }
                *ret = total;
                r = 0;
                break;
        }
out:
        free(img);
        fclose(f);
        return r;
}

cube_error *cube__cpu_load(const cube__kernel_desc *desc, const char *artifact_path,
                           cube__module **ret_module, uint32_t *ret_shared_bytes)
{
        cube__module *m = calloc(1, sizeof(*m));
        uint64_t shared = 0;

        if (!m)
                return host_oom("loading a kernel");
        m->dl = dlopen(artifact_path, RTLD_NOW | RTLD_LOCAL);
        if (!m->dl) {
                cube_error *e = defect("cannot load kernel '%s' from %s: %s", desc->entry,
                                       artifact_path, dlerror());
                free(m);
                return e;
        }
        *(void **) &m->unit_entry = dlsym(m->dl, "cube__unit_entry");
        *(void **) &m->cube_entry = dlsym(m->dl, "cube__cube_entry");
        if (!m->unit_entry || !m->cube_entry) {
                dlclose(m->dl);
                free(m);
                return defect("%s holds no cube entry points; it was not built by this "
                              "backend", artifact_path);
        }
        if (shared_bytes_of(artifact_path, &shared) < 0) {
                dlclose(m->dl);
                free(m);
                return defect("cannot read the shared memory kernel '%s' declares from %s",
                              desc->entry, artifact_path);
        }
        m->uses_sync = desc->uses_sync;
        m->n_buffers = desc->n_buffers;
        *ret_shared_bytes = shared > UINT32_MAX ? UINT32_MAX : (uint32_t) shared;
        *ret_module = m;
        return NULL;
}

void cube__cpu_unload(cube__module *m)
{
        if (!m)
                return;
        dlclose(m->dl);
        free(m);
}
