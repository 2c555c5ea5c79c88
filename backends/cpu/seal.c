/*
 * seal.c - what the CPU device's processes do to themselves before they run
 * anything a client sent: drop privileges, fence the file system (Landlock)
 * and the system calls (seccomp).
 *
 * The device process runs kernels, which are a client's code; the builder
 * runs the compiler over a client's source. Neither may reach anything of
 * cubed or of the machine: no capability, no new privilege through exec, no
 * file outside a private directory, no socket, no other process.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "seal.h"

int cube__seal_privileges(void)
{
        struct __user_cap_header_struct head = { _LINUX_CAPABILITY_VERSION_3, 0 };
        struct __user_cap_data_struct data[2];

        (void) prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        for (int cap = 0; cap < 64; cap++)
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL && errno != EPERM)
                        return -errno;
        memset(data, 0, sizeof(data));
        if (syscall(SYS_capset, &head, data) < 0)
                return -errno;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
        return 0;
}

#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif

#define FS_READ (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | \
                 LANDLOCK_ACCESS_FS_READ_DIR)
#define FS_FILE_RIGHTS (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | \
                        LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE | \
                        LANDLOCK_ACCESS_FS_IOCTL_DEV)

static int add_path(int ruleset, const char *path, uint64_t access, uint64_t handled)
{
        struct landlock_path_beneath_attr rule = { 0 };
        struct stat st;
        int fd = open(path, O_PATH | O_CLOEXEC), r = 0;

        if (fd < 0)
                return errno == ENOENT ? 0 : -errno;
        if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
                access &= FS_FILE_RIGHTS;
        rule.allowed_access = access & handled;
        rule.parent_fd = fd;
        if (rule.allowed_access &&
            syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) < 0)
                r = -errno;
        close(fd);
        return r;
}

int cube__seal_landlock(const char *rw_dir, bool strict)
{
        static const char *const system_dirs[] = {
                "/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/OpenCL", "/dev/null",
                "/dev/urandom", "/proc/self", "/sys/devices/system/cpu",
        };
        struct landlock_ruleset_attr attr = { 0 };
        uint64_t handled;
        long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
        int ruleset, r = 0;

        if (abi < 1)
                return -ENOSYS;
        handled = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1;       /* ABI 1 */
        if (abi >= 2)
                handled |= LANDLOCK_ACCESS_FS_REFER;
        if (abi >= 3)
                handled |= LANDLOCK_ACCESS_FS_TRUNCATE;
        if (abi >= 5)
                handled |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
        if (!strict)
                handled &= ~FS_READ;
        attr.handled_access_fs = handled;
        ruleset = (int) syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
        if (ruleset < 0)
                return -errno;
        r = add_path(ruleset, rw_dir, handled, handled);
        for (size_t i = 0; strict && r == 0 && i < sizeof(system_dirs) / sizeof(system_dirs[0]); i++)
                r = add_path(ruleset, system_dirs[i], FS_READ, handled);
        if (r == 0 && syscall(SYS_landlock_restrict_self, ruleset, 0) < 0)
                r = -errno;
        close(ruleset);
        return r;
}

/* Every call the device process makes once sealed, found by tracing whole
 * runs of the suites: threads and their synchronisation, memory, time, the
 * control socket, and the files PoCL writes and maps in its private cache
 * directory when it loads a program (Landlock keeps those inside it). */
static const int allowed[] = {
        SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev), SCMP_SYS(pread64),
        SCMP_SYS(pwrite64), SCMP_SYS(close), SCMP_SYS(lseek), SCMP_SYS(fstat),
        SCMP_SYS(newfstatat), SCMP_SYS(statx), SCMP_SYS(stat), SCMP_SYS(lstat),
        SCMP_SYS(openat), SCMP_SYS(open), SCMP_SYS(mkdir), SCMP_SYS(mkdirat), SCMP_SYS(rename),
        SCMP_SYS(renameat), SCMP_SYS(renameat2), SCMP_SYS(unlink), SCMP_SYS(unlinkat),
        SCMP_SYS(getdents64), SCMP_SYS(access), SCMP_SYS(faccessat), SCMP_SYS(faccessat2),
        SCMP_SYS(readlink), SCMP_SYS(readlinkat), SCMP_SYS(fsync), SCMP_SYS(fdatasync),
        SCMP_SYS(ftruncate), SCMP_SYS(fallocate), SCMP_SYS(flock), SCMP_SYS(getcwd),
        SCMP_SYS(fcntl), SCMP_SYS(dup), SCMP_SYS(dup3), SCMP_SYS(umask), SCMP_SYS(utimensat),
        SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mprotect), SCMP_SYS(mremap),
        SCMP_SYS(madvise), SCMP_SYS(brk), SCMP_SYS(mlock), SCMP_SYS(munlock),
        SCMP_SYS(membarrier), SCMP_SYS(futex), SCMP_SYS(set_robust_list),
        SCMP_SYS(get_robust_list), SCMP_SYS(rseq), SCMP_SYS(set_tid_address),
        SCMP_SYS(sched_yield), SCMP_SYS(sched_getaffinity), SCMP_SYS(sched_setaffinity),
        SCMP_SYS(sched_getparam), SCMP_SYS(sched_getscheduler), SCMP_SYS(sched_get_priority_max),
        SCMP_SYS(sched_get_priority_min), SCMP_SYS(getpriority), SCMP_SYS(setpriority),
        SCMP_SYS(nanosleep), SCMP_SYS(clock_nanosleep), SCMP_SYS(clock_gettime),
        SCMP_SYS(clock_getres), SCMP_SYS(gettimeofday), SCMP_SYS(time), SCMP_SYS(getrusage),
        SCMP_SYS(exit), SCMP_SYS(exit_group), SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigprocmask),
        SCMP_SYS(rt_sigaction), SCMP_SYS(sigaltstack), SCMP_SYS(restart_syscall),
        SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(getppid), SCMP_SYS(getuid),
        SCMP_SYS(geteuid), SCMP_SYS(getgid), SCMP_SYS(getegid), SCMP_SYS(uname),
        SCMP_SYS(sysinfo), SCMP_SYS(getrandom), SCMP_SYS(prlimit64), SCMP_SYS(getrlimit),
        SCMP_SYS(poll), SCMP_SYS(ppoll), SCMP_SYS(recvmsg), SCMP_SYS(sendmsg),
        SCMP_SYS(recvfrom), SCMP_SYS(sendto), SCMP_SYS(pipe2), SCMP_SYS(eventfd2),
        SCMP_SYS(prctl), SCMP_SYS(arch_prctl), SCMP_SYS(getcpu), SCMP_SYS(memfd_create),
};

int cube__seal_seccomp(void)
{
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_TRAP);
        int r = 0;
        pid_t self = getpid();

        if (!ctx)
                return -ENOMEM;
        /* Filters that already exist cover PoCL's worker threads too. */
        if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1)) < 0)
                goto out;
        for (size_t i = 0; r == 0 && i < sizeof(allowed) / sizeof(allowed[0]); i++)
                r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allowed[i], 0);
        /* Threads, never processes: clone only with CLONE_THREAD; clone3
         * passes its flags behind a pointer, so it says ENOSYS and glibc
         * falls back to clone. */
        if (r == 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                                     SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
        if (r == 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
        /* Signals to itself only. */
        if (r == 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
                                     SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t) self));
        if (r == 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(kill), 1,
                                     SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t) self));
        if (r == 0)
                r = seccomp_load(ctx);
out:
        seccomp_release(ctx);
        return r;
}
