/*
 * cpu.c - cubed's side of the CPU device: a process of its own that cubed
 * starts, feeds and watches. This file starts it, watches it, and holds
 * the driver table; the files beside it do the rest:
 *
 *   alloc.c    device memory: ranges of the memfd both processes map
 *   submit.c   streams: copies on worker threads, launches through the ring
 *   build.c    compiling in a sandboxed cube-device --build, and loading
 *   peer.c     peer access: another CPU device's memory, mapped here too
 *   graphs.c   graphs the device process keeps
 *   opencl.c   the kernel dialect rewritten as OpenCL C
 *
 * The device is cube-device --serve (device-serve.c), one process per device.
 * Device memory is a memfd both processes map: cubed allocates in it and
 * copies into and out of it with memcpy, on worker threads, in stream order;
 * the device's kernels (PoCL, over the same pages) read and write it in
 * place. Launches cross in the shared ring of queue.h, with a futex doorbell
 * each way. Kernel code never runs in cubed, so whatever a kernel does (a
 * wild write, a fault, a call the seccomp filter refuses, a loop that never
 * ends) ends or poisons only the device process: a monitor thread sees it
 * die (a pidfd) or outlive the kernel timeout (it kills it), and every launch
 * in flight and after completes with a DevicePoison naming the kernel and
 * the fault. The core's poison policy then closes the device and opens a
 * fresh one, or exits.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"
#include "errors.h"
#include "io.h"
#include "sandbox.h"
#include "queue.h"

#define CPU_DEFAULT_MEMORY (4ull << 30)
#define CPU_MAX_UNITS 1024
#define CPU_SPIN_NS 20000
#define CPU_START_TIMEOUT_MS 60000

/* ---------------------------------------------------------------------------
 * The device's runtime directory
 * ------------------------------------------------------------------------- */

/* Makes the device's runtime directory in tmp, and takes the lock inside it
 * that says its daemon still runs (held until the daemon is gone, however
 * it goes). The lock is taken before the file gets its name, so no other
 * daemon ever finds it unlocked while this one lives. */
static int make_runtime_dir(cube__device *d, const char *tmp)
{
        char path[PATH_MAX + 16], named[PATH_MAX + 16];

        snprintf(d->kcache, sizeof(d->kcache), "%s/cube-device-XXXXXX", tmp);
        if (!mkdtemp(d->kcache)) {
                d->kcache[0] = '\0';
                return -errno;
        }
        snprintf(path, sizeof(path), "%s/.owner.new", d->kcache);
        snprintf(named, sizeof(named), "%s/.owner", d->kcache);
        d->owner_fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (d->owner_fd < 0 || flock(d->owner_fd, LOCK_EX) < 0 || rename(path, named) < 0)
                return -errno;
        return 0;
}

/* Removes the runtime directories in tmp that a daemon of this user left
 * when it was killed (or gave up its drain): those whose lock no daemon
 * holds. A directory of a running daemon, of another user, or without a
 * lock is left as it is. */
static void remove_orphans(const char *tmp)
{
        DIR *dp = opendir(tmp);
        struct dirent *de;

        while (dp && (de = readdir(dp))) {
                char path[PATH_MAX], lock[PATH_MAX + 16];
                struct stat st;
                int fd;
                if (strncmp(de->d_name, "cube-device-", 12) != 0)
                        continue;
                snprintf(path, sizeof(path), "%s/%s", tmp, de->d_name);
                if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
                        continue;
                snprintf(lock, sizeof(lock), "%s/.owner", path);
                if ((fd = open(lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
                        continue;
                if (flock(fd, LOCK_EX | LOCK_NB) == 0)
                        cube__sandbox_remove(path);
                close(fd);
        }
        if (dp)
                closedir(dp);
}

/* ---------------------------------------------------------------------------
 * The device process
 * ------------------------------------------------------------------------- */

const char *cube__cpu_signal_name(int sig)
{
        const char *name = sigabbrev_np(sig);
        return name ? name : "?";
}

/* What the device runs as launch seq, for a report: "kernel 'k'", or in a
 * replay "kernel 'k' (launch 3 of graph 2)". Called under post_lock. */
static void running_what(cube__device *d, uint64_t seq, char *buf, size_t cap)
{
        const cube__dgraph *g = d->slot_graph[seq % CUBE__Q_SLOTS];
        uint32_t part = atomic_load(&d->ctl->running_part);

        if (g && part >= 1 && part <= g->n)
                snprintf(buf, cap, "kernel '%s' (launch %u of %s)", g->kernels[part - 1], part,
                         g->label);
        else if (g)
                snprintf(buf, cap, "%s", g->label);
        else
                snprintf(buf, cap, "kernel '%s'", d->slot_kernel[seq % CUBE__Q_SLOTS] ?
                         d->slot_kernel[seq % CUBE__Q_SLOTS] : "?");
}

/* Why the device process ended, for the poison every launch reports. */
static void compose_death(cube__device *d, int status, char *buf, size_t cap)
{
        cube__qctl *c = d->ctl;
        uint64_t seq = atomic_load(&c->running_seq);
        uint32_t sig = atomic_load(&c->fault_signal);
        char where[320];

        pthread_mutex_lock(&d->post_lock);
        if (seq && seq < d->next_seq + 1)
                running_what(d, seq, where, sizeof(where));
        else
                snprintf(where, sizeof(where), "the device (no kernel was running)");
        pthread_mutex_unlock(&d->post_lock);

        if (d->timeout_reason[0])
                snprintf(buf, cap, "%s", d->timeout_reason);
        else if (sig == SIGSYS)
                snprintf(buf, cap, "%s made system call %u, which the CPU device's filter "
                         "refuses; the device process was stopped", where,
                         atomic_load(&c->fault_syscall));
        else if (sig)
                snprintf(buf, cap, "%s faulted on the CPU device: %s (%s) at address 0x%" PRIx64,
                         where, cube__cpu_signal_name((int) sig), strsignal((int) sig),
                         atomic_load(&c->fault_address));
        else if (WIFSIGNALED(status))
                snprintf(buf, cap, "the CPU device process was killed by %s (%s) while running "
                         "%s", cube__cpu_signal_name(WTERMSIG(status)), strsignal(WTERMSIG(status)),
                         where);
        else
                snprintf(buf, cap, "the CPU device process exited with status %d while running "
                         "%s", WIFEXITED(status) ? WEXITSTATUS(status) : -1, where);
}

/* Has the core call loop_ready on its loop thread. */
void cube__cpu_notify_loop(cube__device *d)
{
        uint64_t one = 1;

        if (d->config.loop_fd >= 0)
                (void) !write(d->config.loop_fd, &one, sizeof(one));
}

static void mark_dead(cube__device *d, const char *reason)
{
        pthread_mutex_lock(&d->dead_lock);
        if (!atomic_load(&d->dead))
                snprintf(d->dead_reason, sizeof(d->dead_reason), "%s", reason);
        atomic_store(&d->dead, true);
        pthread_mutex_unlock(&d->dead_lock);
        atomic_fetch_add(&d->ctl->completions, 1);
        cube__q_futex(&d->ctl->completions, FUTEX_WAKE, INT_MAX, NULL);
        cube__cpu_notify_loop(d);
}

/* Watches the device process: reaps it when it dies, and kills it when one
 * launch has run longer than the kernel timeout. */
static void *monitor_thread(void *arg)
{
        cube__device *d = arg;
        uint64_t timeout_ns = (uint64_t) d->config.kernel_timeout_ms * 1000000ull;

        for (;;) {
                struct pollfd p = { .fd = d->pidfd, .events = POLLIN };
                int wait_ms = 100;
                uint64_t seq = atomic_load(&d->ctl->running_seq);
                uint64_t since = atomic_load(&d->ctl->running_since);

                if (timeout_ns && seq && !d->timeout_reason[0]) {
                        uint64_t now = cube__now_ns();
                        if (now >= since + timeout_ns && atomic_load(&d->ctl->running_seq) == seq) {
                                char what[320];
                                pthread_mutex_lock(&d->post_lock);
                                running_what(d, seq, what, sizeof(what));
                                snprintf(d->timeout_reason, sizeof(d->timeout_reason),
                                         "%s ran longer than the kernel timeout "
                                         "(--kernel-timeout %.3g s); the CPU device process "
                                         "was stopped (a kernel this long needs a larger "
                                         "--kernel-timeout, 0: no limit)", what,
                                         (double) d->config.kernel_timeout_ms / 1000.0);
                                pthread_mutex_unlock(&d->post_lock);
                                kill(d->pid, SIGKILL);
                        } else if (now < since + timeout_ns) {
                                uint64_t left = (since + timeout_ns - now) / 1000000ull + 1;
                                if (left < (uint64_t) wait_ms)
                                        wait_ms = (int) left;
                        }
                }
                /* The device is not trusted to wake the loop either. */
                uint64_t lw = atomic_load(&d->ctl->loop_wanted);
                if (lw && atomic_load(&cube__q_slot(d->queue, lw)->state) == CUBE__SLOT_DONE)
                        cube__cpu_notify_loop(d);
                int status = 0;
                bool gone;
                if (d->pidfd >= 0) {
                        gone = poll(&p, 1, wait_ms) > 0;
                        while (gone && waitpid(d->pid, &status, 0) < 0 && errno == EINTR)
                                ;
                } else {
                        struct timespec t = { 0, (long) (wait_ms < 20 ? wait_ms : 20) * 1000000L };
                        nanosleep(&t, NULL);
                        gone = waitpid(d->pid, &status, WNOHANG) == d->pid;
                }
                if (gone) {
                        char reason[768];
                        compose_death(d, status, reason, sizeof(reason));
                        mark_dead(d, reason);
                        return NULL;
                }
        }
}

static int memfd(const char *name, uint64_t size)
{
        int fd = memfd_create(name, MFD_CLOEXEC);

        if (fd < 0)
                return -errno;
        if (ftruncate(fd, (off_t) size) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

/* Starts cube-device --serve and waits for it to say it is up and sealed. */
static int start_device(cube__device *d, const char **ret_why)
{
        static char why[PATH_MAX + 600];
        extern char **environ;
        int sv[2], hi[4], r;
        char mem_arg[32];
        posix_spawn_file_actions_t fa;
        const char *tmp = getenv("TMPDIR");

        if (cube__device_helper(d->helper, sizeof(d->helper)) < 0) {
                snprintf(why, sizeof(why), "cannot find cube-device (looked beside cubed and at "
                         "%s)", CUBE_DEVICE_INSTALLED);
                *ret_why = why;
                return -ENOENT;
        }
        tmp = tmp && *tmp ? tmp : "/tmp";
        remove_orphans(tmp);
        if ((r = make_runtime_dir(d, tmp)) < 0) {
                *ret_why = "cannot create the device's private directory";
                return r;
        }
        if ((d->memory_fd = memfd("cube-device-memory", d->memory_limit)) < 0 ||
            (d->queue_fd = memfd("cube-device-queue", CUBE__Q_BYTES)) < 0) {
                *ret_why = "cannot create device memory (memfd)";
                return -ENOMEM;
        }
        d->memory = mmap(NULL, d->memory_limit, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                         d->memory_fd, 0);
        d->queue = mmap(NULL, CUBE__Q_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, d->queue_fd, 0);
        if (d->memory == MAP_FAILED || d->queue == MAP_FAILED) {
                if (d->memory == MAP_FAILED)
                        d->memory = NULL;
                if (d->queue == MAP_FAILED)
                        d->queue = NULL;
                *ret_why = "cannot map device memory";
                return -ENOMEM;
        }
        d->ctl = d->queue;
        d->ctl->magic = CUBE__Q_MAGIC;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
                *ret_why = "cannot create the device's control socket";
                return -errno;
        }
        d->control_fd = sv[0];
        /* High numbers first, so that the dup2s below never overwrite one
         * another. */
        hi[0] = fcntl(d->memory_fd, F_DUPFD_CLOEXEC, 100);
        hi[1] = fcntl(d->queue_fd, F_DUPFD_CLOEXEC, 100);
        hi[2] = fcntl(sv[1], F_DUPFD_CLOEXEC, 100);
        hi[3] = d->config.loop_fd >= 0 ? fcntl(d->config.loop_fd, F_DUPFD_CLOEXEC, 100) : -1;
        close(sv[1]);
        snprintf(mem_arg, sizeof(mem_arg), "%" PRIu64, d->memory_limit);

        size_t n_env = 0;
        while (environ[n_env])
                n_env++;
        char **env = calloc(n_env + 4, sizeof(char *));
        size_t m = 0;
        /* PoCL's settings stay out of the sealed device, but for the devices
         * the machine's owner chose, which its builds (sandbox.c) see too:
         * the two must agree, or no build loads. */
        for (size_t i = 0; env && i < n_env; i++)
                if (strncmp(environ[i], "POCL_", 5) != 0 ||
                    strncmp(environ[i], "POCL_DEVICES=", 13) == 0)
                        env[m++] = environ[i];
        char cache_env[PATH_MAX + 32];
        snprintf(cache_env, sizeof(cache_env), "POCL_CACHE_DIR=%s", d->kcache);
        if (env)
                env[m++] = cache_env;
        char *argv[] = { d->helper, (char *) "--serve", d->kcache, mem_arg, NULL };

        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, hi[0], CUBE__FD_MEMORY);
        posix_spawn_file_actions_adddup2(&fa, hi[1], CUBE__FD_QUEUE);
        posix_spawn_file_actions_adddup2(&fa, hi[2], CUBE__FD_CONTROL);
        if (hi[3] >= 0)
                posix_spawn_file_actions_adddup2(&fa, hi[3], CUBE__FD_NOTIFY);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        r = env ? posix_spawn(&d->pid, d->helper, &fa, NULL, argv, env) : ENOMEM;
        posix_spawn_file_actions_destroy(&fa);
        free(env);
        for (int i = 0; i < 4; i++)
                if (hi[i] >= 0)
                        close(hi[i]);
        if (r != 0) {
                d->pid = 0;
                snprintf(why, sizeof(why), "cannot start %s: %s", d->helper, strerror(r));
                *ret_why = why;
                return -r;
        }
        /* Without pidfds (before Linux 5.3, or under valgrind) the monitor
         * polls waitpid instead. */
        d->pidfd = (int) syscall(SYS_pidfd_open, d->pid, 0);

        /* Its first answer: up and sealed, or why not. */
        struct pollfd p = { .fd = d->control_fd, .events = POLLIN };
        cube__msg_reply rep;
        char text[512] = "";
        if (poll(&p, 1, CPU_START_TIMEOUT_MS) <= 0 ||
            cube__read_all(d->control_fd, &rep, sizeof(rep)) < 0 || rep.len >= sizeof(text) ||
            cube__read_all(d->control_fd, text, rep.len) < 0) {
                snprintf(why, sizeof(why), "the CPU device process (%s) did not come up", d->helper);
                *ret_why = why;
                return -EIO;
        }
        text[rep.len] = '\0';
        if (rep.status != 0) {
                snprintf(why, sizeof(why), "the CPU device process could not start: %s", text);
                *ret_why = why;
                return -EIO;
        }
        d->window = d->ctl->window;
        if (d->window == 0 || d->window > CUBE__WINDOW_MAX || (d->window & (d->window - 1))) {
                snprintf(why, sizeof(why), "the CPU device process gave no usable window (%" PRIu64
                         " bytes)", d->window);
                *ret_why = why;
                return -EIO;
        }
        /* Part of every kernel's cache key: "arguments 3" is the form the
         * prelude gives a kernel's arguments (device.h), "builds 3" the
         * form of a build's artifact: 1, work-group functions without their
         * IR; 2, a build for a cube dimension holding functions for large
         * grids too; 3, for cubes more than one unit deep, none that takes
         * a deep grid for a small one (device-build.c). Raising either has
         * an artifact of an earlier form built again, never loaded. The
         * whole reaches clients in hello, which takes up to 511 bytes
         * (PoCL's part names the CPU): keep cube's part short. */
        snprintf(d->target, sizeof(d->target), "pocl %s; dialect 1; arguments 3; builds 3",
                 text);
        if ((r = pthread_create(&d->monitor, NULL, monitor_thread, d)) != 0) {
                *ret_why = "cannot start the device monitor";
                return -r;
        }
        d->monitor_started = true;
        return 0;
}

/* Sends a control message that has no answer (m->len bytes of payload
 * follow it); a device that is gone is not written to. */
int cube__cpu_send_notice(cube__device *d, const cube__msg *m, const void *payload)
{
        int r = -EPIPE;

        pthread_mutex_lock(&d->control_lock);
        if (!atomic_load(&d->dead) && (r = cube__write_all(d->control_fd, m, sizeof(*m))) == 0 &&
            m->len)
                r = cube__write_all(d->control_fd, payload, m->len);
        pthread_mutex_unlock(&d->control_lock);
        return r;
}

/* Reads the device's answer to a control message (under control_lock): its
 * status, and its reason into reason, cut to what cap holds (the rest is
 * read and dropped). Returns 0, or a negative errno. */
int cube__cpu_read_reply(cube__device *d, cube__msg_reply *ret_reply, char *reason, size_t cap)
{
        cube__msg_reply rep;
        int r = cube__read_all(d->control_fd, &rep, sizeof(rep));

        if (r == 0) {
                uint32_t keep = rep.len < cap ? rep.len : (uint32_t) cap - 1;
                r = cube__read_all(d->control_fd, reason, keep);
                reason[keep] = '\0';
                for (uint32_t left = rep.len - keep; r == 0 && left > 0; left--)
                        r = cube__read_all(d->control_fd, (char[1]) { 0 }, 1);
        }
        if (r == 0)
                *ret_reply = rep;
        return r;
}

/* ---------------------------------------------------------------------------
 * The driver
 * ------------------------------------------------------------------------- */

static void cpu_close(cube__device *d);

static int cpu_open(const cube__device_config *config, cube__device **ret_device, const char **ret_why)
{
        cube__device *d;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        unsigned n;
        int r = -ENOMEM;

        if (config->index != 0) {
                *ret_why = "the cpu backend has one device, cpu0";
                return -ENODEV;
        }
        d = calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        d->spin_ns = cube__q_spin_ns(CPU_SPIN_NS);
        d->config = *config;
        d->memory_limit = config->memory_limit ? config->memory_limit : CPU_DEFAULT_MEMORY;
        d->memory_limit = (d->memory_limit + CPU_PAGE - 1) / CPU_PAGE * CPU_PAGE;
        if (d->memory_limit > CUBE__PEER_SPAN) {
                free(d);
                *ret_why = "the CPU device holds at most 16 TiB";
                return -EINVAL;
        }
        d->memory_fd = d->queue_fd = d->control_fd = d->pidfd = d->owner_fd = -1;
        pthread_mutex_init(&d->lock, NULL);
        pthread_mutex_init(&d->post_lock, NULL);
        pthread_mutex_init(&d->dead_lock, NULL);
        pthread_mutex_init(&d->control_lock, NULL);
        pthread_cond_init(&d->wake, NULL);
        /* The core schedules builds over its slots, fairly between users
         * (kernels.c); this only keeps to the same number. */
        sem_init(&d->compiles, 0, config->compile_slots ? config->compile_slots :
                                  cores > 1 ? (unsigned) (cores < 4 ? cores : 4) : 1);
        if ((d->holes = malloc(sizeof(*d->holes))))
                *d->holes = (hole) { 0, d->memory_limit, NULL };
        if (!d->holes || (r = start_device(d, ret_why)) < 0) {
                cpu_close(d);
                return r;
        }
        n = cores > 1 ? (unsigned) cores : 2;
        if (n > CPU_MAX_WORKERS)
                n = CPU_MAX_WORKERS;
        d->workers = calloc(n, sizeof(*d->workers));
        for (unsigned i = 0; d->workers && i < n; i++) {
                if (pthread_create(&d->workers[i], NULL, cube__cpu_worker, d) != 0)
                        break;
                d->n_workers++;
        }
        if (d->n_workers == 0) {
                *ret_why = "could not start the cpu backend's worker threads";
                cpu_close(d);
                return -EAGAIN;
        }
        *ret_device = d;
        return 0;
}

static void cpu_close(cube__device *d)
{
        if (!d)
                return;
        /* What the loop thread posted ends first, while the workers still
         * run what it leaves behind. */
        for (;;) {
                pthread_mutex_lock(&d->lock);
                cube__cpu_harvest_direct(d);
                unsigned left = d->direct_n;
                pthread_mutex_unlock(&d->lock);
                if (!left)
                        break;
                cube__cpu_loop_idle(d);         /* the loop no longer rings for it */
                usleep(1000);
        }
        pthread_mutex_lock(&d->lock);
        d->stopping = true;
        pthread_cond_broadcast(&d->wake);
        pthread_mutex_unlock(&d->lock);
        for (unsigned i = 0; i < d->n_workers; i++)
                pthread_join(d->workers[i], NULL);
        free(d->workers);
        atomic_store(&d->closing, true);
        if (d->pid > 0 && !atomic_load(&d->dead))
                kill(d->pid, SIGKILL);
        if (d->monitor_started)
                pthread_join(d->monitor, NULL);
        else if (d->pid > 0)
                waitpid(d->pid, NULL, 0);
        if (d->control_fd >= 0)
                close(d->control_fd);
        if (d->pidfd >= 0)
                close(d->pidfd);
        if (d->memory)
                munmap(d->memory, d->memory_limit);
        for (uint32_t i = 0; i < atomic_load(&d->n_peers); i++)
                munmap(d->peers[i].map, d->peers[i].size);
        if (d->queue)
                munmap(d->queue, CUBE__Q_BYTES);
        if (d->memory_fd >= 0)
                close(d->memory_fd);
        if (d->queue_fd >= 0)
                close(d->queue_fd);
        cube__sandbox_remove(d->kcache);
        if (d->owner_fd >= 0)
                close(d->owner_fd);
        for (hole *h = d->holes, *next; h; h = next) {
                next = h->next;
                free(h);
        }
        sem_destroy(&d->compiles);
        pthread_mutex_destroy(&d->lock);
        pthread_mutex_destroy(&d->post_lock);
        pthread_mutex_destroy(&d->dead_lock);
        pthread_mutex_destroy(&d->control_lock);
        pthread_cond_destroy(&d->wake);
        free(d);
}

static void cpu_properties(cube__device *d, cube_device_properties *ret)
{
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE);

        *ret = (cube_device_properties) {
                .name = "cpu",
                .memory_bytes = d->memory_limit,
                .max_page_size = d->memory_limit < d->window ? d->memory_limit : d->window,
                .alignment = CPU_ALIGNMENT,
                .plane_size_min = 1,
                .plane_size_max = 1,
                .max_bindings = 1024,
                .max_shared_memory_size = l1d > 0 ? (uint32_t) l1d : 64 * 1024,
                .max_cube_count = { 65535, 65535, 65535 },
                .max_units_per_cube = CPU_MAX_UNITS,
                .max_cube_dim = { 1024, 1024, 64 },
                .num_streaming_multiprocessors = cores > 0 ? (uint32_t) cores : 1,
                .num_cpu_cores = cores > 0 ? (uint32_t) cores : 1,
        };
}

static const char *cpu_target(cube__device *d)
{
        return d->target;
}

const cube__driver cube__driver_cpu = {
        .name = "cpu",
        .open = cpu_open,
        .close = cpu_close,
        .properties = cpu_properties,
        .alloc = cube__cpu_alloc,
        .release = cube__cpu_release,
        .discard = cube__cpu_discard,
        .host_view = cube__cpu_host_view,
        .stream_open = cube__cpu_stream_open,
        .stream_close = cube__cpu_stream_close,
        .submit = cube__cpu_submit,
        .loop_ready = cube__cpu_loop_ready,
        .loop_idle = cube__cpu_loop_idle,
        .artifact_ext = "ocl",
        .target = cpu_target,
        .compile = cube__cpu_compile,
        .compile_shape = cube__cpu_compile_shape,
        .load = cube__cpu_load,
        .unload = cube__cpu_unload,
        .graph_create = cube__cpu_graph_create,
        .graph_destroy = cube__cpu_graph_destroy,
        .peer_export = cube__cpu_peer_export,
        .peer_offset = cube__cpu_peer_offset,
        .peer_attach = cube__cpu_peer_attach,
        .peer_storage = cube__cpu_peer_storage,
};
