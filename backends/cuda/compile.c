/*
 * compile.c - CUDA kernels: NVRTC, the CUBIN it makes, and what the CUBIN
 * says a kernel needs.
 *
 * A kernel is the dialect's source behind the CUDA prelude, compiled in
 * process by NVRTC to a CUBIN for the device's own architecture, so loading
 * it runs no driver JIT and a cached CUBIN is all a restarted daemon needs.
 * The options matter: -default-device makes helper functions device code
 * (NVRTC refuses host functions in JIT mode), and --modify-stack-limit=false
 * keeps NVRTC from calling setrlimit(), which would change the stack limit
 * of the whole multithreaded daemon on every compile.
 *
 * cubed never runs NVRTC itself: each compile is a child process (the
 * daemon's own binary started again, see compile_child_entry) under
 * limits (CPU time, address space, output size), so what a tenant's source
 * makes the compiler do happens outside the daemon and ends with its limit.
 * A source the compiler rejects, or one that runs it past its limits, is a
 * CompilationError (a refusal); a compiler that dies otherwise is a defect.
 *
 * The resources a kernel needs are read from the CUBIN's ELF (.nv.info
 * attributes, .nv.shared.NAME) here, so that they can be checked against
 * ptxas -v without a GPU; on a device, cuFuncGetAttribute says the same and
 * is what the launch checks use.
 */
#include <errno.h>
#include <elf.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "internal.h"

/* Every kernel's NVRTC options after -arch; part of the cache key. */
static const char *const options[] = {
        "-default-device", "--modify-stack-limit=false", "-minimal",
};

/* Kernels may include these; NVRTC has no C library, the prelude defines
 * what they would. */
static const char *const header_names[] = {
        "stdint.h", "stddef.h", "stdbool.h", "math.h", "limits.h", "float.h",
};

const char *cube__cuda_options(void)
{
        return "-default-device --modify-stack-limit=false -minimal";
}

cube_error *cube__cuda_compile(const cube__nvrtc_api *nv, const cube__kernel_desc *desc,
                               int arch, bool ptx, char **ret_image, size_t *ret_size)
{
        const char *headers[sizeof(header_names) / sizeof(header_names[0])];
        const char *opts[8];
        char archopt[32], line[160], *src = NULL, *log = NULL, *image = NULL;
        size_t nh = sizeof(header_names) / sizeof(header_names[0]), n = 0, size = 0, len;
        nvrtcProgram prog = NULL;
        nvrtcResult r;
        cube_error *e = NULL;

        for (size_t i = 0; i < nh; i++)
                headers[i] = "";
        snprintf(archopt, sizeof(archopt), "-arch=%s_%d", ptx ? "compute" : "sm", arch);
        opts[n++] = archopt;
        for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++)
                opts[n++] = options[i];

        /* #line makes the log say ENTRY.c(LINE) of the kernel's own source. */
        snprintf(line, sizeof(line), "\n#line 1 \"%s.c\"\n", desc->entry);
        len = strlen(cube__cuda_prelude) + strlen(line) + strlen(desc->source) + 1;
        if (!(src = malloc(len)))
                goto oom;
        snprintf(src, len, "%s%s%s", cube__cuda_prelude, line, desc->source);

        r = nv->nvrtcCreateProgram(&prog, src, desc->entry, (int) nh, headers, header_names);
        if (r != NVRTC_SUCCESS) {
                e = cube__nvrtc_error(r, desc->entry, NULL);
                goto out;
        }
        r = nv->nvrtcCompileProgram(prog, (int) n, opts);
        if (r != NVRTC_SUCCESS) {
                size_t loglen = 0;
                if (nv->nvrtcGetProgramLogSize(prog, &loglen) == NVRTC_SUCCESS && loglen > 0 &&
                    (log = malloc(loglen + 1)) && nv->nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS)
                        log[loglen] = '\0';
                else if (log)
                        log[0] = '\0';
                e = cube__nvrtc_error(r, desc->entry, log);
                goto out;
        }
        r = ptx ? nv->nvrtcGetPTXSize(prog, &size) : nv->nvrtcGetCUBINSize(prog, &size);
        if (r == NVRTC_SUCCESS && size == 0)
                r = NVRTC_ERROR_INTERNAL_ERROR;
        if (r == NVRTC_SUCCESS && !(image = malloc(size)))
                goto oom;
        if (r == NVRTC_SUCCESS)
                r = ptx ? nv->nvrtcGetPTX(prog, image) : nv->nvrtcGetCUBIN(prog, image);
        if (r != NVRTC_SUCCESS) {
                e = cube__nvrtc_error(r, desc->entry, NULL);
                free(image);
                goto out;
        }
        *ret_image = image;
        *ret_size = size;
        goto out;
oom:
        e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_OUT_OF_MEMORY,
                           "out of host memory compiling kernel '%s'", desc->entry));
out:
        if (prog)
                nv->nvrtcDestroyProgram(&prog);
        free(log);
        free(src);
        return e;
}

/* .nv.info attribute formats and the attributes read (cuobjdump -elf names). */
enum { EIFMT_NVAL = 1, EIFMT_BVAL = 2, EIFMT_HVAL = 3, EIFMT_SVAL = 4 };
enum { EIATTR_PARAM_CBANK = 0x0a, EIATTR_FRAME_SIZE = 0x11, EIATTR_REGCOUNT = 0x2f };

#define SHARED_RESERVED 1024

static bool within(size_t size, uint64_t off, uint64_t len)
{
        return off <= size && len <= size - off;
}

/* Walks one .nv.info section, taking the attributes of symbol sym (global
 * sections name it; a function's own section holds only its attributes). */
static void read_info(const uint8_t *p, uint64_t len, uint32_t sym, bool own,
                      cube__cuda_resources *res)
{
        uint64_t i = 0;

        while (i + 4 <= len) {
                uint8_t fmt = p[i], attr = p[i + 1];
                uint16_t v;
                memcpy(&v, p + i + 2, 2);
                if (fmt != EIFMT_SVAL) {
                        i += 4;
                        continue;
                }
                if (i + 4 + v > len)
                        return;
                const uint8_t *d = p + i + 4;
                uint32_t a = 0, b = 0;
                if (v >= 8) {
                        memcpy(&a, d, 4);
                        memcpy(&b, d + 4, 4);
                }
                if (v >= 8 && attr == EIATTR_REGCOUNT && a == sym)
                        res->registers = b;
                else if (v >= 8 && attr == EIATTR_FRAME_SIZE && a == sym)
                        res->local_bytes = b;
                else if (v >= 8 && attr == EIATTR_PARAM_CBANK && own)
                        res->param_bytes = b >> 16;     /* u16 offset, u16 size */
                i += 4 + v;
        }
}

int cube__cuda_cubin_resources(const void *cubin, size_t size, const char *entry,
                               cube__cuda_resources *ret)
{
        const uint8_t *img = cubin;
        const Elf64_Ehdr *eh = cubin;
        cube__cuda_resources res = { 0 };
        char own_info[128], shared[128];
        uint32_t sym = UINT32_MAX;

        if (size < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
            eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
            !within(size, eh->e_shoff, (uint64_t) eh->e_shnum * sizeof(Elf64_Shdr)) ||
            eh->e_shstrndx >= eh->e_shnum)
                return -EINVAL;
        const Elf64_Shdr *sh = (const Elf64_Shdr *) (img + eh->e_shoff);
        const Elf64_Shdr *names = &sh[eh->e_shstrndx];
        if (!within(size, names->sh_offset, names->sh_size))
                return -EINVAL;
        snprintf(own_info, sizeof(own_info), ".nv.info.%s", entry);
        snprintf(shared, sizeof(shared), ".nv.shared.%s", entry);

        /* The entry's symbol index, which the global attributes name. */
        for (unsigned i = 0; i < eh->e_shnum && sym == UINT32_MAX; i++) {
                if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum ||
                    !within(size, sh[i].sh_offset, sh[i].sh_size))
                        continue;
                const Elf64_Shdr *str = &sh[sh[i].sh_link];
                if (!within(size, str->sh_offset, str->sh_size))
                        return -EINVAL;
                const Elf64_Sym *s = (const Elf64_Sym *) (img + sh[i].sh_offset);
                for (size_t j = 0; j < sh[i].sh_size / sizeof(*s); j++)
                        if (s[j].st_name < str->sh_size &&
                            strncmp((const char *) img + str->sh_offset + s[j].st_name, entry,
                                    str->sh_size - s[j].st_name) == 0 &&
                            ELF64_ST_TYPE(s[j].st_info) == STT_FUNC) {
                                sym = (uint32_t) j;
                                break;
                        }
        }
        if (sym == UINT32_MAX)
                return -EINVAL;

        for (unsigned i = 0; i < eh->e_shnum; i++) {
                if (sh[i].sh_name >= names->sh_size || !within(size, sh[i].sh_offset,
                                                                sh[i].sh_type == SHT_NOBITS ?
                                                                0 : sh[i].sh_size))
                        continue;
                const char *name = (const char *) img + names->sh_offset + sh[i].sh_name;
                size_t room = names->sh_size - sh[i].sh_name;
                if (strncmp(name, ".nv.info", room) == 0)
                        read_info(img + sh[i].sh_offset, sh[i].sh_size, sym, false, &res);
                else if (strncmp(name, own_info, room) == 0)
                        read_info(img + sh[i].sh_offset, sh[i].sh_size, sym, true, &res);
                else if (strncmp(name, shared, room) == 0)
                        /* sm_80 and later reserve 1 KiB of every block's
                         * shared memory for the system, inside this section;
                         * ptxas -v and cuFuncGetAttribute leave it out. */
                        res.shared_bytes = (uint32_t) (sh[i].sh_size > SHARED_RESERVED ?
                                                       sh[i].sh_size - SHARED_RESERVED : 0);
        }
        *ret = res;
        return 0;
}

/* Local memory the driver may hold for stacks at once: a kernel whose frame,
 * times every unit the device can hold resident, needs more is refused. */
#define STACK_RESERVE_MAX (2ull << 30)

cube_error *cube__cuda_check_stack(const cube__cuda_resources *res, const char *entry,
                                   uint64_t resident_units, uint64_t device_memory)
{
        uint64_t cap = device_memory / 16 < STACK_RESERVE_MAX ? device_memory / 16 :
                       STACK_RESERVE_MAX;
        uint64_t need = (uint64_t) res->local_bytes * resident_units;

        if (need <= cap)
                return NULL;
        return cube__err_text(CUBE_COMPILATION_GENERIC, "kernel '%s' needs %" PRIu32 " bytes of "
                              "stack per unit (local arrays or spills); the device would reserve "
                              "%" PRIu64 " MiB of local memory for its %" PRIu64 " resident "
                              "units, more than the %" PRIu64 " MiB cubed allows: make the "
                              "per-unit arrays smaller or SHARED", entry, res->local_bytes,
                              need >> 20, resident_units, cap >> 20);
}

/* The size of a scalar type the dialect names, or 0. */
static unsigned scalar_size(const char *t, size_t n)
{
        static const struct { const char *name; unsigned size; } types[] = {
                { "char", 1 }, { "int8_t", 1 }, { "uint8_t", 1 }, { "bool", 1 },
                { "short", 2 }, { "int16_t", 2 }, { "uint16_t", 2 }, { "half", 2 },
                { "__half", 2 }, { "__nv_bfloat16", 2 },
                { "int", 4 }, { "unsigned", 4 }, { "int32_t", 4 }, { "uint32_t", 4 },
                { "float", 4 }, { "long", 8 }, { "int64_t", 8 }, { "uint64_t", 8 },
                { "double", 8 }, { "size_t", 8 },
        };
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
                if (strlen(types[i].name) == n && strncmp(types[i].name, t, n) == 0)
                        return types[i].size;
        return 0;
}

/* The alignment of the element type in one parameter's text ("const float4
 * *__restrict__ out"): the identifier before the first '*'. Vector types
 * (float2, int4) align to their whole size; float3 to its scalar's. */
static uint8_t param_alignment(const char *p, size_t n)
{
        const char *star = memchr(p, '*', n), *end, *begin;

        if (!star)
                return 1;
        end = star;
        while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n'))
                end--;
        begin = end;
        while (begin > p && (begin[-1] == '_' || (begin[-1] >= 'a' && begin[-1] <= 'z') ||
                             (begin[-1] >= 'A' && begin[-1] <= 'Z') ||
                             (begin[-1] >= '0' && begin[-1] <= '9')))
                begin--;
        size_t len = (size_t) (end - begin);
        unsigned size = scalar_size(begin, len), lanes = 1;
        if (!size && len > 1 && (end[-1] == '2' || end[-1] == '3' || end[-1] == '4')) {
                size = scalar_size(begin, len - 1);
                lanes = end[-1] == '3' ? 1 : (unsigned) (end[-1] - '0');
        }
        return (uint8_t) (size ? size * lanes : 1);
}

void cube__cuda_buffer_alignments(const char *source, const char *entry, uint8_t *ret_align,
                                  uint32_t n_buffers)
{
        char needle[160];
        const char *p = NULL;

        for (uint32_t i = 0; i < n_buffers; i++)
                ret_align[i] = 1;
        snprintf(needle, sizeof(needle), "void %s(", entry);
        if (source)
                p = strstr(source, needle);
        if (!p)
                return;
        p += strlen(needle);
        for (uint32_t i = 0; i < n_buffers && *p && *p != ')'; i++) {
                size_t n = strcspn(p, ",)");
                ret_align[i] = param_alignment(p, n);
                p += n;
                if (*p == ',')
                        p++;
        }
}

/* ---- the confined compile ---------------------------------------------- */

#define COMPILE_AS_MB 8192
#define COMPILE_FSIZE_MB 256

/* What the child reports on its pipe: one tag byte, then a reason. */
enum { TAG_OK = 'O', TAG_SOURCE = 'C', TAG_OOM = 'M', TAG_DEFECT = 'D' };

static void limit(int resource, rlim_t value)
{
        struct rlimit rl = { value, value };
        (void) setrlimit(resource, &rl);
}

static void write_all(int fd, const void *p, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w <= 0)
                        return;
                p = (const char *) p + w;
                n -= (size_t) w;
        }
}

#define CHILD_ENV "CUBE__CUDA_COMPILE_CHILD=1"

/* The child: a fresh process (the daemon's own binary, started again), so
 * nothing of the daemon's threads is half-done in it. Compiles under its
 * limits and writes the CUBIN to tmp, then its verdict to fd. */
static void __attribute__((noreturn)) compile_child(const cube__kernel_desc *desc, int arch,
                                                    unsigned cpu_s, const char *tmp, int fd)
{
        const cube__nvrtc_api *nv;
        const char *why;
        char *image = NULL;
        size_t size = 0;
        cube_error *e;

        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
                _exit(4);
        limit(RLIMIT_CPU, cpu_s);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        limit(RLIMIT_AS, (rlim_t) COMPILE_AS_MB << 20);
#endif
        limit(RLIMIT_FSIZE, (rlim_t) COMPILE_FSIZE_MB << 20);
        limit(RLIMIT_CORE, 0);
        if (cube__cuda_load_nvrtc(&nv, &why) < 0)
                e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN,
                                   "cannot compile kernel '%s': %s", desc->entry, why));
        else
                e = cube__cuda_compile(nv, desc, arch, false, &image, &size);
        if (!e) {
                int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                if (out < 0)
                        _exit(3);
                write_all(out, image, size);
                if (close(out) < 0)
                        _exit(3);
                write_all(fd, (char[]) { TAG_OK }, 1);
                _exit(0);
        }
        char tag = TAG_DEFECT;
        if (cube_error_kind_of(e) == CUBE_COMPILATION_GENERIC)
                tag = TAG_SOURCE;
        else if (strstr(cube_error_message(e), "out of host memory") ||
                 strstr(cube_error_message(e), "ran out of host memory"))
                tag = TAG_OOM;
        const char *text = cube_error_kind_of(e) == CUBE_COMPILATION_GENERIC ?
                           cube_error_reason(e) : cube_error_message(e);
        write_all(fd, &tag, 1);
        write_all(fd, text, strlen(text));
        _exit(0);
}

/* Reads a whole file (the kernel's source, handed to the child). */
/* ptxas refuses a kernel whose static shared memory passes what a block may
 * declare ("uses too much shared data (0xf000 bytes, 0xc000 max)"): the
 * answer a launch of it gets on any device, TooManyResources(SharedMemory),
 * and the source's doing, so it is not compiled again. NULL when the
 * compiler said something else. */
static cube_error *too_much_shared(const char *log)
{
        const char *p = strstr(log, "uses too much shared data (");
        unsigned long long requested, max;

        if (!p || sscanf(p, "uses too much shared data (%llx bytes, %llx max)", &requested,
                         &max) != 2)
                return NULL;
        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_wrap(
                CUBE_LAUNCH_TOO_MANY_RESOURCES,
                cube__err_resource(CUBE_RESOURCE_SHARED_MEMORY, requested, max)));
}

static char *read_all(const char *path)
{
        FILE *f = fopen(path, "rbe");
        char *buf = NULL;
        size_t len = 0, cap = 0, n;

        if (!f)
                return NULL;
        do {
                if (len + 4097 > cap) {
                        char *b = realloc(buf, cap = cap * 2 + 8192);
                        if (!b) {
                                free(buf);
                                fclose(f);
                                return NULL;
                        }
                        buf = b;
                }
                n = fread(buf + len, 1, cap - len - 1, f);
                len += n;
        } while (n > 0);
        fclose(f);
        buf[len] = '\0';
        return buf;
}

/* A compile child starts here, before main: glibc hands constructors argc,
 * argv and envp. argv: name entry arch cpu_s source tmp fd. */
static void __attribute__((constructor)) compile_child_entry(int argc, char **argv, char **envp)
{
        (void) envp;
        const char *v = getenv("CUBE__CUDA_COMPILE_CHILD");
        if (!v || strcmp(v, "1") != 0)
                return;
        if (argc != 7)
                _exit(5);
        char *source = read_all(argv[4]);
        if (!source)
                _exit(6);
        cube__kernel_desc desc = { .source = source, .entry = argv[1] };
        compile_child(&desc, atoi(argv[2]), (unsigned) strtoul(argv[3], NULL, 10), argv[5],
                      atoi(argv[6]));
}

static const char *signal_name(int sig)
{
        const char *s = sigdescr_np(sig);
        return s ? s : "a signal";
}

cube_error *cube__cuda_compile_confined(const cube__kernel_desc *desc, int arch, unsigned cpu_s,
                                        const char *path)
{
        extern char **environ;
        char tmp[PATH_MAX], src[PATH_MAX + 8], self[PATH_MAX], arch_s[16], cpu_s_s[16], fd_s[16];
        char *text = NULL, **envp = NULL;
        size_t len = 0, cap = 0;
        int fds[2], status = 0;
        struct rusage ru = { 0 };
        bool wall_timeout = false;
        pid_t pid;

        if (!cpu_s)
                cpu_s = 60;
        snprintf(tmp, sizeof(tmp), "%s.tmp-%d", path, (int) gettid());
        snprintf(src, sizeof(src), "%s.cu", tmp);
        ssize_t self_len = readlink("/proc/self/exe", self, sizeof(self) - 1);
        size_t n_env = 0;
        while (environ[n_env])
                n_env++;
        FILE *f = fopen(src, "wbe");
        bool written = f && fputs(desc->source, f) >= 0;
        if (f && fclose(f) != 0)
                written = false;
        if (!written || self_len <= 0 || !(envp = calloc(n_env + 2, sizeof(*envp))) ||
            pipe2(fds, O_CLOEXEC) < 0) {
                cube_error *e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_UNKNOWN, "cannot start compiling kernel '%s': %s",
                        desc->entry, strerror(errno)));
                unlink(src);
                free(envp);
                return e;
        }
        self[self_len] = '\0';
        memcpy(envp, environ, n_env * sizeof(*envp));
        envp[n_env] = (char *) CHILD_ENV;
        snprintf(arch_s, sizeof(arch_s), "%d", arch);
        snprintf(cpu_s_s, sizeof(cpu_s_s), "%u", cpu_s);
        snprintf(fd_s, sizeof(fd_s), "%d", fds[1]);
        char *argv[] = { (char *) "cube-nvrtc", (char *) desc->entry, arch_s, cpu_s_s, src, tmp,
                         fd_s, NULL };
        /* Between fork and exec only what is async-signal-safe: the daemon's
         * other threads may hold any lock. */
        pid = fork();
        if (pid == 0) {
                (void) fcntl(fds[1], F_SETFD, 0);
                execve(self, argv, envp);
                _exit(127);
        }
        free(envp);
        close(fds[1]);
        if (pid < 0) {
                close(fds[0]);
                unlink(src);
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN,
                        "cannot compile kernel '%s': fork: %s", desc->entry, strerror(errno)));
        }
        /* The wall-clock bound: the CPU limit twice over, and some slack for
         * a loaded machine. */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        long wall_ms = (long) cpu_s * 2000 + 10000;
        for (;;) {
                clock_gettime(CLOCK_MONOTONIC, &t);
                long left = wall_ms - ((t.tv_sec - t0.tv_sec) * 1000 +
                                       (t.tv_nsec - t0.tv_nsec) / 1000000);
                struct pollfd p = { .fd = fds[0], .events = POLLIN };
                if (left <= 0) {
                        wall_timeout = true;
                        kill(pid, SIGKILL);
                        break;
                }
                if (poll(&p, 1, (int) left) <= 0)
                        continue;
                if (len + 4096 + 1 > cap) {
                        char *n = realloc(text, cap = cap * 2 + 8192);
                        if (!n)
                                break;
                        text = n;
                }
                ssize_t r = read(fds[0], text + len, cap - len - 1);
                if (r <= 0)
                        break;
                len += (size_t) r;
        }
        close(fds[0]);
        while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR)
                ;
        if (text)
                text[len] = '\0';

        double cpu = (double) ru.ru_utime.tv_sec + (double) ru.ru_stime.tv_sec +
                     ((double) ru.ru_utime.tv_usec + (double) ru.ru_stime.tv_usec) / 1e6;
        int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        char tag = len ? text[0] : 0;
        const char *reason = len > 1 ? text + 1 : "";
        cube_error *e = NULL;

        if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && tag == TAG_OK) {
                if (rename(tmp, path) < 0)
                        e = cube__err_wrap(CUBE_SERVER_IO, cube__err_text(CUBE_IO_UNKNOWN,
                                "cannot store the compiled kernel at %s: %s; check the cache "
                                "directory", path, strerror(errno)));
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && tag == TAG_SOURCE) {
                e = too_much_shared(reason);
                if (!e)
                        e = cube__err_text(CUBE_COMPILATION_GENERIC, "%s", reason);
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && tag == TAG_OOM) {
                e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_OUT_OF_MEMORY,
                                   "%s", reason));
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && tag == TAG_DEFECT) {
                e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN, "%s",
                                   reason));
        } else if ((sig == SIGXCPU || sig == SIGKILL) && cpu + 0.5 >= (double) cpu_s) {
                /* Stopped by its own CPU limit: the source's doing. */
                e = cube__err_text(CUBE_COMPILATION_GENERIC, "NVRTC building kernel '%s' ran past "
                                   "its CPU time limit of %u s and was stopped", desc->entry,
                                   cpu_s);
        } else if (sig == SIGXFSZ) {
                e = cube__err_text(CUBE_COMPILATION_GENERIC, "NVRTC building kernel '%s' wrote "
                                   "past its output limit of %u MiB and was stopped", desc->entry,
                                   COMPILE_FSIZE_MB);
        } else if (wall_timeout) {
                e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN,
                        "NVRTC building kernel '%s' outlived its wall-clock limit after only "
                        "%.1f s of CPU time (the machine is starved); a later launch tries again",
                        desc->entry, cpu));
        } else {
                e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN,
                        "NVRTC died (%s, exit status %d) building kernel '%s'; a later launch "
                        "tries again", sig ? signal_name(sig) : "no signal",
                        WIFEXITED(status) ? WEXITSTATUS(status) : -1, desc->entry));
        }
        if (e)
                unlink(tmp);
        unlink(src);
        free(text);
        return e;
}
