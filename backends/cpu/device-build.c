/*
 * device-build.c - cube-device --build DIR CPU_SECONDS ADDRESS_SPACE_MB
 * FILE_SIZE_MB: one kernel compiled, in a sandbox.
 *
 * A short-lived compiler run: under limits it sets itself (CPU time,
 * address space, file size), without a network, writing only into DIR, it
 * builds DIR/kernel.cl with PoCL and writes the program binary to
 * DIR/artifact (queue.h's artifact header first), its work-group functions
 * without the IR they came from (device-binary.c). With DIR/shape ("X Y
 * Z"), the source is built for cubes of X x Y x Z units: a looped entry
 * point walks its cube in loops of that fixed count (the prelude's
 * CUBE__SHAPE_X/Y/Z), and the others get PoCL's work-group functions
 * specialised for that local size, one for grids of under 65,535 units a
 * side and one for any grid (what PoCL's default build does at the first
 * launch of each), at a lower priority than the device's launches. Exit 0:
 * built; 10: the source did not build (DIR/log has the compiler's words);
 * 11: anything else.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device.h"
#include "io.h"
#include "queue.h"
#include "seal.h"

#define EXIT_SOURCE 10
#define EXIT_DEFECT 11
#define SHAPE_BUILD_NICE 10     /* added to cubed's: from 0, a weight of 110 against 1024 */

static int build_fail(FILE *log, int code, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        if (log) {
                vfprintf(log, fmt, ap);
                fputc('\n', log);
                fclose(log);
        }
        va_end(ap);
        return code;
}

static char *slurp(const char *path, size_t *ret_len)
{
        FILE *f = fopen(path, "rb");
        char *buf = NULL;
        long len;

        if (!f)
                return NULL;
        if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
            (buf = malloc((size_t) len + 1)) && fread(buf, 1, (size_t) len, f) == (size_t) len) {
                buf[len] = '\0';
                *ret_len = (size_t) len;
        } else {
                free(buf);
                buf = NULL;
        }
        fclose(f);
        return buf;
}

/* Has PoCL add to a program's binaries the work-group functions for cubes
 * of shape, on grids under 65,535 units a side (small_grid) or on any grid.
 * PoCL looks a launch's function up under one of the two names, by the
 * grid's width as it measures it, and runs the generic function where that
 * one is missing. POCL_BINARY_SPECIALIZE_WG names them as PoCL names their
 * directories in its cache. */
static void specialise(const unsigned shape[3], bool small_grid)
{
        char spec[96];

        snprintf(spec, sizeof(spec), "%u-%u-%u-goffs0%s", shape[0], shape[1], shape[2],
                 small_grid ? "-smallgrid" : "");
        setenv("POCL_BINARY_SPECIALIZE_WG", spec, 1);
}

/* src built with options for PoCL's devices (cube__dev_find_devices'):
 * 0 and the program, or the exit code, with the compiler's words in log. */
static int compile(const char *src, const char *options, FILE *log, cpu_devices *ret_devs,
                   cl_program *ret_program)
{
        cl_context context;
        cl_program program;
        cl_int err;

        if (cube__dev_find_devices(ret_devs) < 0 || ret_devs->n == 0)
                return build_fail(log, EXIT_DEFECT, "no OpenCL CPU device (is pocl-opencl-icd "
                                  "installed?)");
        context = clCreateContext(NULL, ret_devs->n, ret_devs->ids, NULL, NULL, &err);
        if (!context)
                return build_fail(log, EXIT_DEFECT, "clCreateContext: %d", err);
        program = clCreateProgramWithSource(context, 1, &src, NULL, &err);
        if (!program)
                return build_fail(log, EXIT_DEFECT, "clCreateProgramWithSource: %d", err);
        err = clBuildProgram(program, ret_devs->n, ret_devs->ids, options, NULL, NULL);
        if (err != CL_SUCCESS) {
                size_t n = 0;
                char *text;
                clGetProgramBuildInfo(program, ret_devs->ids[0], CL_PROGRAM_BUILD_LOG, 0, NULL,
                                      &n);
                text = calloc(1, n + 1);
                if (text)
                        clGetProgramBuildInfo(program, ret_devs->ids[0], CL_PROGRAM_BUILD_LOG, n,
                                              text, NULL);
                return build_fail(log, err == CL_BUILD_PROGRAM_FAILURE ? EXIT_SOURCE : EXIT_DEFECT,
                                  "%s", text && *text ? text : "the OpenCL compiler failed");
        }
        *ret_program = program;
        return 0;
}

/* The work-group functions for cubes of shape on grids of any width, built
 * into the cache directory the program's binaries are taken from. Their own
 * process builds them: PoCL keeps the functions it has built for a local
 * size under that size alone, and one process asked for both variants
 * builds only the first. Without them a launch of 65,535 units or more a
 * side (a reduction over 16 million floats) would run the generic function
 * of a kernel built for its shape, 1.2x slower. A variant that fails to
 * build is left out: the launches it was for run the generic function. */
static void build_large_grid_variant(const char *src, const char *options,
                                     const unsigned shape[3])
{
        pid_t parent = getpid(), pid = fork();
        int status;

        if (pid == 0) {
                cpu_devices devs;
                cl_program program;
                size_t sizes[2];

                /* A build cubed kills (a stopping daemon's) takes this with it. */
                (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent)
                        _exit(EXIT_DEFECT);
                specialise(shape, false);
                /* Asking for the binaries' sizes has PoCL build the
                 * functions that go into them. */
                _exit(compile(src, options, NULL, &devs, &program) == 0 &&
                      clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES,
                                       devs.n * sizeof(size_t), sizes, NULL) == CL_SUCCESS ?
                      0 : EXIT_DEFECT);
        }
        while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
}

/* Copies the file name from one directory into another, where it appears
 * whole or not at all (PoCL loads what it finds there): 0 or -1. */
static int copy_file(int from_dir, const char *name, int to_dir)
{
        char buf[65536], part[NAME_MAX + 8];
        int from = openat(from_dir, name, O_RDONLY | O_CLOEXEC), to = -1, r = -1;
        ssize_t n;

        snprintf(part, sizeof(part), ".%.*s~", NAME_MAX - 2, name);
        if (from >= 0 && (to = openat(to_dir, part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                                      0600)) >= 0) {
                while ((n = read(from, buf, sizeof(buf))) > 0 &&
                       cube__write_all(to, buf, (size_t) n) == 0)
                        ;
                r = n == 0 ? 0 : -1;
        }
        if (to >= 0 && close(to) < 0)
                r = -1;
        if (to >= 0 && (r < 0 || renameat(to_dir, part, to_dir, name) < 0)) {
                unlinkat(to_dir, part, 0);
                r = -1;
        }
        if (from >= 0)
                close(from);
        return r;
}

/* Whether entry e of directory d is of type (DT_DIR, DT_REG), asking the
 * file system where readdir does not say. */
static bool entry_is(DIR *d, const struct dirent *e, unsigned char type)
{
        struct stat st;

        if (e->d_type != DT_UNKNOWN)
                return e->d_type == type;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return false;
        return type == DT_DIR ? S_ISDIR(st.st_mode) : type == DT_REG && S_ISREG(st.st_mode);
}

/* For cubes more than one unit deep, the functions for any grid stand in
 * for those for small grids: each directory of them under path (an entry
 * point's, in PoCL's cache) is copied beside itself under the small-grid
 * name. PoCL 3.1 takes a grid's depth to be the cube's depth squared,
 * whatever the count of cubes along z, so it runs such a launch over
 * 65,535 units deep or more with the small-grid function; and that code
 * takes CUBE_COUNT_Z to be under 65,536 / depth: a test of it against a
 * larger count comes out false. Cubes one unit deep are safe, their count
 * being held to 65,535. A directory not copied leaves the launches that
 * would have run it on the generic function. */
static void alias_small_grid(const char *path, const unsigned shape[3], int depth)
{
        char spec[64], child[PATH_MAX];
        struct dirent *e;
        DIR *d;

        if (depth > 4 || !(d = opendir(path)))
                return;
        snprintf(spec, sizeof(spec), "%u-%u-%u-goffs0", shape[0], shape[1], shape[2]);
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.' || !entry_is(d, e, DT_DIR) ||
                    snprintf(child, sizeof(child), "%s/%s", path, e->d_name) >= (int) sizeof(child))
                        continue;
                if (strcmp(e->d_name, spec) != 0) {
                        alias_small_grid(child, shape, depth + 1);
                        continue;
                }
                char alias[PATH_MAX + 16];
                DIR *files = opendir(child);
                struct dirent *f;
                int to = -1;
                snprintf(alias, sizeof(alias), "%s-smallgrid", child);
                if (files && mkdir(alias, 0700) == 0 &&
                    (to = open(alias, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0)
                        while ((f = readdir(files)))
                                if (entry_is(files, f, DT_REG) &&
                                    copy_file(dirfd(files), f->d_name, to) < 0)
                                        break;
                if (files)
                        closedir(files);
                if (to >= 0)
                        close(to);
        }
        closedir(d);
}

int cube__dev_build_main(int argc, char **argv)
{
        char path[PATH_MAX];
        const char *dir;
        cpu_devices devs;
        cl_program program;
        cl_kernel kernel;
        cl_int err;
        size_t src_len;
        char *src, *entry;
        FILE *log;

        if (argc != 6)
                return EXIT_DEFECT;
        dir = argv[2];
        cube__dev_confine(dir, argv[3], argv[4], argv[5]);

        snprintf(path, sizeof(path), "%s/log", dir);
        if (!(log = fopen(path, "w")))
                return EXIT_DEFECT;
        snprintf(path, sizeof(path), "%s/kernel.cl", dir);
        if (!(src = slurp(path, &src_len)))
                return build_fail(log, EXIT_DEFECT, "cannot read %s", path);
        snprintf(path, sizeof(path), "%s/entry", dir);
        if (!(entry = slurp(path, &src_len)))
                return build_fail(log, EXIT_DEFECT, "cannot read %s", path);
        setenv("POCL_CACHE_DIR", dir, 1);
        /* A specialised build differs from the generic one in its options, so
         * PoCL keys its functions apart: a device that ran the generic
         * function for a shape keeps it under the generic build's key. */
        char options[160] = "", *shape_text;
        unsigned shape[3];
        snprintf(path, sizeof(path), "%s/shape", dir);
        if ((shape_text = slurp(path, &src_len))) {
                if (sscanf(shape_text, "%u %u %u", &shape[0], &shape[1], &shape[2]) != 3 ||
                    !shape[0] || !shape[1] || !shape[2])
                        return build_fail(log, EXIT_DEFECT, "a shape that is not three sizes");
                free(shape_text);
                snprintf(options, sizeof(options), "-DCUBE__SHAPE_X=%u -DCUBE__SHAPE_Y=%u "
                         "-DCUBE__SHAPE_Z=%u", shape[0], shape[1], shape[2]);
                /* No one waits for this build, and it runs beside the very
                 * launches it is to speed up: on a busy CPU it takes a
                 * tenth, not half, of what they would have had. */
                (void) !nice(SHAPE_BUILD_NICE);
                build_large_grid_variant(src, options, shape);
                if (shape[2] == 1) {
                        specialise(shape, true);
                } else {
                        unsetenv("POCL_BINARY_SPECIALIZE_WG");
                        alias_small_grid(dir, shape, 0);
                }
        } else {
                unsetenv("POCL_BINARY_SPECIALIZE_WG");
        }
        int code = compile(src, options, log, &devs, &program);
        if (code != 0)
                return code;
        /* The program holds every entry point of the source; the one the
         * build was asked for must be among them. */
        char name[96];
        snprintf(name, sizeof(name), CUBE__KERNEL_PREFIX "%s", entry);
        kernel = clCreateKernel(program, name, &err);
        if (!kernel)
                return build_fail(log, EXIT_SOURCE, "the program has no kernel %s (%d)", entry, err);
        clReleaseKernel(kernel);

        cube__artifact_head head = { .magic = CUBE__ARTIFACT_MAGIC };
        /* Asking for the binaries makes PoCL build the generic work-group
         * functions into them, so the sealed device never compiles. One per
         * device, in cube__dev_find_devices' order (queue.h says how they are laid). */
        cl_device_id order[2];
        size_t sizes[2] = { 0, 0 };
        unsigned char *bins[2] = { NULL, NULL };
        uint64_t blob_head[3] = { devs.n, 0, 0 };
        if (clGetProgramInfo(program, CL_PROGRAM_DEVICES, devs.n * sizeof(cl_device_id), order,
                             NULL) != CL_SUCCESS ||
            clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, devs.n * sizeof(size_t), sizes,
                             NULL) != CL_SUCCESS)
                return build_fail(log, EXIT_DEFECT, "no program binaries");
        for (cl_uint i = 0; i < devs.n; i++) {
                if (sizes[i] == 0 || !(bins[i] = malloc(sizes[i])))
                        return build_fail(log, EXIT_DEFECT, "no program binary for device %u", i);
        }
        err = clGetProgramInfo(program, CL_PROGRAM_BINARIES, devs.n * sizeof(bins[0]), bins, NULL);
        if (err != CL_SUCCESS)
                return build_fail(log, EXIT_DEFECT, "clGetProgramInfo(BINARIES): %d", err);
        for (cl_uint i = 0; i < devs.n; i++)
                if (cube__dev_binary_strip_ir(bins[i], &sizes[i]) < 0)
                        return build_fail(log, EXIT_DEFECT, "PoCL wrote a program binary of a "
                                          "format this cube does not know (not version 9)");
        /* The blob lists the binaries in cube__dev_find_devices' order, whatever
         * order PoCL keeps them in. */
        unsigned char *in_order[2];
        for (cl_uint i = 0; i < devs.n; i++) {
                cl_uint j = devs.n == 2 && order[0] != devs.ids[0] ? 1 - i : i;
                in_order[i] = bins[j];
                blob_head[1 + i] = sizes[j];
        }
        head.binary_bytes = (1 + devs.n) * sizeof(uint64_t);
        for (cl_uint i = 0; i < devs.n; i++)
                head.binary_bytes += blob_head[1 + i];

        snprintf(path, sizeof(path), "%s/artifact", dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        bool written = fd >= 0 && cube__write_all(fd, &head, sizeof(head)) == 0 &&
                       cube__write_all(fd, blob_head, (1 + devs.n) * sizeof(uint64_t)) == 0;
        for (cl_uint i = 0; written && i < devs.n; i++)
                written = cube__write_all(fd, in_order[i], blob_head[1 + i]) == 0;
        if (!written || fsync(fd) < 0 || close(fd) < 0)
                return build_fail(log, EXIT_DEFECT, "cannot write %s: %s", path, strerror(errno));
        fclose(log);
        return 0;
}
