/*
 * device-main.c - cube-device, the CPU device's own process: the mode it
 * runs in, and what the modes share (PoCL's devices, resource limits).
 *
 *   cube-device --serve KCACHE_DIR MEMORY_BYTES
 *   cube-device --build DIR CPU_SECONDS ADDRESS_SPACE_MB FILE_SIZE_MB
 *   cube-device --check DIR CPU_SECONDS ADDRESS_SPACE_MB FILE_SIZE_MB
 *   cube-device --probe-seal KCACHE WHAT
 *
 * Serving (device-serve.c), it is the device: cubed starts one per CPU
 * device, and it runs the launches cubed posts on device memory both of
 * them map, sealed from everything else.
 *
 * Building (device-build.c), it is a short-lived compiler run, sealed too,
 * that turns a kernel's OpenCL C into the program binaries the device loads.
 * Checking (backends/frontend/check-main.c), the same, running the kernel
 * front end on a tenant's source, for every backend.
 *
 * Probing, it seals itself as the device does and tries one thing, so that
 * a test can see the seal hold.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "device.h"
#include "queue.h"
#include "seal.h"

/* ---------------------------------------------------------------------------
 * What the modes share
 * ------------------------------------------------------------------------- */

/* PoCL's spread and inline devices (device.h's cpu_devices). */
int cube__dev_find_devices(cpu_devices *ret)
{
        cl_platform_id platforms[8];
        cl_uint n = 0;

        /* Both devices, unless the machine's owner chose PoCL's devices. */
        setenv("POCL_DEVICES", "pthread basic", 0);
        if (clGetPlatformIDs(8, platforms, &n) != CL_SUCCESS || n == 0)
                return -1;
        for (cl_uint i = 0; i < n && i < 8; i++) {
                cl_device_id ids[8], spread = NULL, in_line = NULL;
                cl_uint nd = 0;

                if (clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_CPU, 8, ids, &nd) != CL_SUCCESS ||
                    nd == 0)
                        continue;
                for (cl_uint j = 0; j < nd && j < 8; j++) {
                        char name[64] = "";
                        clGetDeviceInfo(ids[j], CL_DEVICE_NAME, sizeof(name) - 1, name, NULL);
                        if (strncmp(name, "basic", 5) == 0 && !in_line)
                                in_line = ids[j];
                        else if (!spread)
                                spread = ids[j];
                }
                ret->platform = platforms[i];
                ret->n = 0;
                if (spread)
                        ret->ids[ret->n++] = spread;
                if (in_line)
                        ret->ids[ret->n++] = in_line;
                ret->in_line_only = in_line && !spread;
                return 0;
        }
        return -1;
}

void cube__dev_limit(int resource, rlim_t value)
{
        struct rlimit rl = { value, value };

        (void) setrlimit(resource, &rl);
}

void cube__dev_confine(const char *dir, const char *cpu_s, const char *as_mb, const char *fs_mb)
{
        /* The limits come first: whatever the source makes the compiler do
         * happens under them. */
        cube__dev_limit(RLIMIT_CPU, (rlim_t) strtoul(cpu_s, NULL, 10));
#if !defined(__SANITIZE_ADDRESS__)
        cube__dev_limit(RLIMIT_AS, (rlim_t) strtoul(as_mb, NULL, 10) << 20);
#endif
        cube__dev_limit(RLIMIT_FSIZE, (rlim_t) strtoul(fs_mb, NULL, 10) << 20);
        cube__dev_limit(RLIMIT_CORE, 0);
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        (void) unshare(CLONE_NEWNET);
        (void) cube__seal_privileges();
        (void) cube__seal_landlock(dir, false);
}

/* cube-device --probe-seal KCACHE WHAT: seals itself as the device does,
 * then tries WHAT, so that a test can see the seal hold. Exits 0 when WHAT
 * worked, with its errno when it failed, and 128 + SIGSYS when the filter
 * stopped it. */
static int probe_main(int argc, char **argv)
{
        static cube__qctl scratch;
        const char *what;
        char path[PATH_MAX];
        int r, fd;

        if (argc != 4)
                return 2;
        what = argv[3];
        cube__ctl = &scratch;
        if ((r = cube__dev_seal_self(argv[2])) < 0)
                return 100;
        if (strcmp(what, "write-private") == 0) {
                snprintf(path, sizeof(path), "%s/probe", argv[2]);
                fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                return fd < 0 ? errno : 0;
        }
        if (strcmp(what, "write-outside") == 0) {
                snprintf(path, sizeof(path), "%s.outside", argv[2]);
                fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                return fd < 0 ? errno : 0;
        }
        if (strcmp(what, "read-outside") == 0) {
                fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
                return fd < 0 ? errno : 0;
        }
        if (strcmp(what, "socket") == 0)
                return syscall(SYS_socket, AF_UNIX, SOCK_STREAM, 0) < 0 ? errno : 0;
        if (strcmp(what, "execve") == 0) {
                char *args[] = { (char *) "/bin/true", NULL };
                return syscall(SYS_execve, "/bin/true", args, NULL) < 0 ? errno : 0;
        }
        if (strcmp(what, "fork") == 0)
                return syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0) < 0 ? errno : 0;
        if (strcmp(what, "kill-parent") == 0)
                return syscall(SYS_kill, getppid(), 0) < 0 ? errno : 0;
        if (strcmp(what, "ptrace") == 0)
                return syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, getppid(), 0, 0) < 0 ? errno : 0;
        return 2;
}

int main(int argc, char **argv)
{
        if (argc >= 2 && strcmp(argv[1], "--serve") == 0)
                return cube__dev_serve_main(argc, argv);
        if (argc >= 2 && strcmp(argv[1], "--build") == 0)
                return cube__dev_build_main(argc, argv);
        if (argc >= 2 && strcmp(argv[1], "--check") == 0)
                return cube__dev_check_main(argc, argv);
        if (argc >= 2 && strcmp(argv[1], "--probe-seal") == 0)
                return probe_main(argc, argv);
        fprintf(stderr, "usage: cube-device --serve KCACHE_DIR MEMORY_BYTES\n"
                        "       cube-device --build DIR CPU_SECONDS ADDRESS_SPACE_MB "
                        "FILE_SIZE_MB\n"
                        "       cube-device --check DIR CPU_SECONDS ADDRESS_SPACE_MB "
                        "FILE_SIZE_MB\n");
        return 2;
}
