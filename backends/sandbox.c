/*
 * sandbox.c - cube-device run as a short-lived confined child: a kernel's
 * build (backends/cpu/build.c) or its check by the front end
 * (daemon/kernel-check.c).
 *
 * Whatever a tenant's source makes a compiler do happens in such a child,
 * never in cubed: it sets its own limits (CPU time, address space, output
 * size), drops its privileges and network, and writes only into its
 * directory. The parent waits for it within a wall-clock limit, so a child
 * that sleeps instead of burning its CPU time cannot hold a thread of
 * cubed's for ever.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io.h"
#include "sandbox.h"

/* cube-device: beside cubed (the build tree, or one install directory),
 * else where meson installs it; $CUBE_DEVICE_BIN overrides both. */
int cube__device_helper(char *buf, size_t cap)
{
        const char *env = getenv("CUBE_DEVICE_BIN");
        char self[PATH_MAX];
        ssize_t n;

        if (!buf || cap == 0)
                return -EINVAL;
        if (env && *env) {
                snprintf(buf, cap, "%s", env);
                return access(buf, X_OK) == 0 ? 0 : -ENOENT;
        }
        n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n > 0) {
                self[n] = '\0';
                char *slash = strrchr(self, '/');
                if (slash) {
                        *slash = '\0';
                        int len = snprintf(buf, cap, "%s/cube-device", self);
                        if (len > 0 && (size_t) len < cap && access(buf, X_OK) == 0)
                                return 0;
                }
        }
        snprintf(buf, cap, "%s", CUBE_DEVICE_INSTALLED);
        return access(buf, X_OK) == 0 ? 0 : -ENOENT;
}

int cube__sandbox_run(const char *helper, const char *mode, const char *dir, unsigned cpu_s,
                      unsigned as_mb, unsigned fsize_mb, const atomic_bool *abandon,
                      cube__sandbox_result *ret)
{
        extern char **environ;
        char path[PATH_MAX + 16], cpu_arg[16], as_arg[16], fs_arg[16];
        posix_spawn_file_actions_t fa;
        pid_t pid;
        int r;

        memset(ret, 0, sizeof(*ret));
        if (abandon && atomic_load(abandon)) {
                ret->abandoned = true;
                return 0;
        }
        snprintf(cpu_arg, sizeof(cpu_arg), "%u", cpu_s);
        snprintf(as_arg, sizeof(as_arg), "%u", as_mb);
        snprintf(fs_arg, sizeof(fs_arg), "%u", fsize_mb);
        char *argv[] = { (char *) helper, (char *) mode, (char *) dir, cpu_arg, as_arg, fs_arg,
                         NULL };
        snprintf(path, sizeof(path), "%s/stderr", dir);
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        r = posix_spawn(&pid, helper, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0)
                return r;

        uint64_t deadline = cube__now_ns() + (uint64_t) (cpu_s * 3 + 10) * 1000000000ull;
        for (;;) {
                pid_t w = wait4(pid, &ret->status, WNOHANG, &ret->ru);
                if (w == pid)
                        break;
                if (w < 0 && errno != EINTR) {
                        ret->status = -1;
                        break;
                }
                ret->abandoned = abandon && atomic_load(abandon);
                ret->wall_timeout = !ret->abandoned && cube__now_ns() > deadline;
                if (ret->abandoned || ret->wall_timeout) {
                        kill(pid, SIGKILL);
                        while (wait4(pid, &ret->status, 0, &ret->ru) < 0 && errno == EINTR)
                                ;
                        break;
                }
                struct timespec t = { 0, 2 * 1000 * 1000 };
                nanosleep(&t, NULL);
        }
        return 0;
}

char *cube__sandbox_read(const char *dir, const char *name, size_t max)
{
        char path[PATH_MAX];
        char *buf;
        ssize_t n;
        size_t got = 0;
        int fd;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
                return NULL;
        if (!(buf = malloc(max + 1))) {
                close(fd);
                return NULL;
        }
        while (got < max && (n = read(fd, buf + got, max - got)) > 0)
                got += (size_t) n;
        buf[got] = '\0';
        close(fd);
        return buf;
}

int cube__sandbox_write(const char *dir, const char *name, const char *text)
{
        char path[PATH_MAX];
        int fd, r;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
                return -errno;
        r = cube__write_all(fd, text, strlen(text));
        if (close(fd) < 0 && r == 0)
                r = -errno;
        return r;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void) st;
        (void) flag;
        (void) ftw;
        (void) remove(path);
        return 0;
}

void cube__sandbox_remove(const char *dir)
{
        if (dir && dir[0])
                (void) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
