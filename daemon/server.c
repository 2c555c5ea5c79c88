/*
 * server.c - the daemon's life: bring the device up, serve, reload, recover
 * from a poisoned device, and stop cleanly.
 *
 * Stopping is a drain, not an abort: the listener closes, collectives that
 * wait on other daemons fail at once (their members are answered first),
 * every connection closes, work already on the device completes, every session's memory is
 * reclaimed, and only then does the loop end. SIGTERM therefore exits 0 with
 * nothing leaked and the socket file removed. The drain is bounded: past
 * drain-timeout the daemon exits 1 rather than hang on a wedged device.
 *
 * A poisoned device is never served forever. Once poison-grace has passed and
 * every session has been told (or twice the grace has passed), the poison
 * policy acts: exit exits 3 so that systemd restarts the daemon, reinit
 * closes every session and brings the device up again under a new service
 * id. Until then every session hears DevicePoisoned on its next operation,
 * and hello, status and cubectl keep answering.
 *
 * Exit status: 0 after a clean stop, 1 when it could not start or a drain
 * timed out, 3 when the poison policy ended it, 4 when the device or its
 * driver is not there (no restart brings it: cubed@.service's
 * RestartPreventExitStatus).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>
#include <dirent.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "requests.h"

/* Takes what an eventfd counted, so that the loop stops being woken for it. */
static void clear_eventfd(int fd, const char *what)
{
        uint64_t n;

        if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
                cube__log(CUBE__LOG_WARNING, "reading the %s eventfd: %s", what, strerror(errno));
}

static void on_completions(uv_poll_t *p, int status, int events)
{
        cube__server *srv = p->data;

        (void) status;
        (void) events;
        clear_eventfd(srv->completions_fd, "completion");
        cube__work_drain(srv);
}

/* The device asks for the loop thread (driver.h's loop_fd): it completes
 * work there, and what it completed is retired at once. The eventfd exists
 * only for a driver with loop_ready. */
static void on_device(uv_poll_t *p, int status, int events)
{
        cube__server *srv = p->data;

        (void) status;
        (void) events;
        clear_eventfd(srv->device_fd, "device's");
        if (srv->device) {
                srv->driver->loop_ready(srv->device);
                cube__work_drain(srv);
        }
}

/* The loop is about to wait: what it submitted this round starts now
 * (driver.h's loop_idle). */
static void on_device_prepare(uv_prepare_t *h)
{
        cube__server *srv = h->data;

        if (srv->device)
                srv->driver->loop_idle(srv->device);
}

static void reload(cube__server *srv);

static void on_signal(uv_signal_t *sig, int signum)
{
        cube__server *srv = sig->data;

        if (signum == SIGHUP) {
                reload(srv);
                return;
        }
        cube__log_id(CUBE__MSG_STOP, CUBE__LOG_NOTICE, NULL, "%s received: draining and stopping",
                     signum == SIGTERM ? "SIGTERM" : "SIGINT");
        cube__server_stop(srv);
}

/* SIGHUP: read the configuration again; keep the running one if it fails. */
static void reload(cube__server *srv)
{
        cube__options next;
        char why[512];
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        sd_notifyf(0, "RELOADING=1\nSTATUS=reloading\nMONOTONIC_USEC=%llu",
                   (unsigned long long) ts.tv_sec * 1000000ull + (unsigned long long) ts.tv_nsec / 1000);
        srv->stats.reloads++;
        if (cube__config_load(srv->opts.config_path, srv->opts.config_optional, srv->overrides,
                              srv->n_overrides, &next, why, sizeof(why)) < 0) {
                srv->stats.reloads_refused++;
                snprintf(srv->reload_error, sizeof(srv->reload_error), "%s", why);
                cube__log_id(CUBE__MSG_RELOAD, CUBE__LOG_ERR, NULL, "reload failed, keeping the "
                             "running configuration: %s", why);
                /* READY=1 must follow RELOADING=1, or systemd waits for it;
                 * STATUS= says the reload was refused and why, so that
                 * `systemctl status` shows it. */
                sd_notifyf(0, "READY=1\nSTATUS=serving %u session(s); reload refused, running "
                           "the previous configuration: %s", srv->n_sessions, why);
                return;
        } else if (!cube__fds_fit(srv, &next, why, sizeof(why))) {
                srv->stats.reloads_refused++;
                snprintf(srv->reload_error, sizeof(srv->reload_error), "%s", why);
                cube__options_done(&next);
                cube__log_id(CUBE__MSG_RELOAD, CUBE__LOG_ERR, NULL, "reload refused, keeping the "
                             "running configuration: %s", why);
                sd_notifyf(0, "READY=1\nSTATUS=serving %u session(s); reload refused, running "
                           "the previous configuration: %s", srv->n_sessions, why);
                return;
        } else {
                srv->reload_error[0] = '\0';
                cube__options_reload(&srv->opts, &next);
                cube__options_done(&next);
                cube__shares_reload(srv);
                const char *path = srv->opts.config_path;
                bool missing = path && access(path, F_OK) != 0;
                cube__log_id(CUBE__MSG_RELOAD, CUBE__LOG_NOTICE, NULL, "configuration reloaded%s%s%s",
                          path ? " from " : " (no configuration file)", path ? path : "",
                          missing ? " (missing: defaults and the command line only)" : "");
        }
        sd_notifyf(0, "READY=1\nSTATUS=serving %u session(s)", srv->n_sessions);
}

static void on_watchdog(uv_timer_t *t)
{
        sd_notify(0, "WATCHDOG=1");
}

static void on_drain_timeout(uv_timer_t *t)
{
        cube__server *srv = t->data;

        cube__log_id(CUBE__MSG_STOP, CUBE__LOG_ERR, NULL, "the drain did not finish in %u s (%u "
                     "operation(s) still on the device); exiting without waiting, exit status 1",
                     srv->opts.drain_timeout_s, srv->inflight);
        sd_notify(0, "STATUS=drain timed out");
        _exit(1);
}

/* Creates the kernel cache directory if needed, and refuses one that others
 * may write: the daemon loads code from it. */
/* Refuses a cache directory with an ancestor someone else could swap: one
 * owned by a user other than this one or root, or one others may write
 * without the sticky bit (a root-owned sticky directory such as /tmp lets
 * no one rename what is ours inside it). */
static int check_cache_ancestors(const char *dir)
{
        char *copy = realpath(dir, NULL), *p;
        int r = 0;

        if (!copy)
                return 0;       /* made below, or reported there */
        for (p = copy; r == 0 && p; p = strchr(p + 1, '/')) {
                struct stat st;
                char keep = p[p == copy ? 1 : 0];

                p[p == copy ? 1 : 0] = '\0';
                if (stat(copy, &st) == 0 &&
                    ((st.st_uid != 0 && st.st_uid != geteuid()) ||
                     ((st.st_mode & 022) && !((st.st_mode & S_ISVTX) && st.st_uid == 0)))) {
                        cube__log(CUBE__LOG_ERR, "the kernel cache %s lies under %s (owner uid "
                                  "%u, mode %04o), which another user could swap for a directory "
                                  "of their own; put the cache where every directory above it "
                                  "belongs to this user or root and only they may write", dir,
                                  copy, (unsigned) st.st_uid, (unsigned) (st.st_mode & 07777));
                        r = -EPERM;
                }
                p[p == copy ? 1 : 0] = keep;
        }
        free(copy);
        return r;
}

static int prepare_cache_dir(cube__server *srv, const char *dir, bool *ret_trusted)
{
        struct stat st;
        char *copy = strdup(dir);

        if (!copy)
                return -ENOMEM;
        for (char *p = copy + 1; *p; p++)
                if (*p == '/') {
                        *p = '\0';
                        (void) mkdir(copy, 0755);
                        *p = '/';
                }
        free(copy);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                cube__log(CUBE__LOG_ERR, "cannot create the kernel cache %s: %s", dir,
                          strerror(errno));
                return -errno;
        }
        if (check_cache_ancestors(dir) < 0)
                return -EPERM;
        /* Held open for the daemon's life: an artifact is trusted only while
         * the path still names this very directory. */
        srv->disk_cache.fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (srv->disk_cache.fd < 0 || fstat(srv->disk_cache.fd, &st) < 0 || !S_ISDIR(st.st_mode)) {
                cube__log(CUBE__LOG_ERR, "the kernel cache %s is not a directory (or is a "
                          "symlink)", dir);
                return -ENOTDIR;
        }
        if (st.st_uid != geteuid() || (st.st_mode & 022)) {
                cube__log(CUBE__LOG_ERR, "the kernel cache %s must be owned by this user and "
                          "writable by no one else (it holds code the daemon loads); fix it "
                          "with chown and chmod 0700", dir);
                return -EPERM;
        }
        /* Artifacts are code the device loads: only a directory that is
         * cube's alone (mode 0700) is trusted to hold them. */
        *ret_trusted = (st.st_mode & 0777) == 0700;
        if (!*ret_trusted)
                cube__log(CUBE__LOG_WARNING, "the kernel cache %s has mode 0%o, not 0700: "
                          "nothing in it is loaded, every kernel is compiled again (fix it with "
                          "chmod 0700)", dir, (unsigned) (st.st_mode & 0777));
        return 0;
}

/* The descriptors open now, counted in /proc/self/fd (less the one that
 * counts them). */
static uint32_t fds_open(void)
{
        DIR *d = opendir("/proc/self/fd");
        uint32_t n = 0;

        if (!d)
                return 16;
        for (struct dirent *e; (e = readdir(d));)
                n += e->d_name[0] != '.';
        closedir(d);
        return n > 0 ? n - 1 : 0;
}

bool cube__fds_fit(const cube__server *srv, cube__options *o, char *why, size_t len)
{
        uint64_t need = (uint64_t) o->max_sessions + CUBE__ADMIN_FDS + CUBE__SPARE_FDS + srv->fd_base;
        uint64_t room = srv->fd_limit > need - o->max_sessions ?
                        srv->fd_limit - (need - o->max_sessions) : 0;

        if (!o->max_sessions || need <= srv->fd_limit)
                return true;
        /* The default is a ceiling, not a promise: where the descriptors
         * hold fewer (a container's hard limit of 4096), a daemon started
         * without a word about max-sessions takes what fits rather than
         * refusing to start. A value the operator chose is kept or refused. */
        if (o->max_sessions == CUBE__DEFAULT_MAX_SESSIONS && room >= CUBE__MIN_FITTED_SESSIONS) {
                cube__log(CUBE__LOG_NOTICE, "max-sessions is %" PRIu64 ", not the default %u: "
                          "RLIMIT_NOFILE allows %" PRIu64 " descriptors (raise LimitNOFILE= or "
                          "ulimit -Hn for more)", room, CUBE__DEFAULT_MAX_SESSIONS, srv->fd_limit);
                o->max_sessions = (uint32_t) room;
                return true;
        }
        snprintf(why, len, "max-sessions %u needs about %" PRIu64 " descriptors (%u open at start, "
                 "%u kept for root and the daemon's user, %u spare), but RLIMIT_NOFILE allows %"
                 PRIu64 "; raise the limit (LimitNOFILE= in the unit, ulimit -Hn) or lower "
                 "max-sessions to %" PRIu64 " or fewer", o->max_sessions, need, srv->fd_base,
                 CUBE__ADMIN_FDS, CUBE__SPARE_FDS, srv->fd_limit, room);
        return false;
}

/* Every session costs a descriptor: the soft limit is raised to the hard
 * one (a shell's soft 1024 fills with one user's sessions), and a
 * max-sessions the descriptors cannot hold is refused. */
static int prepare_descriptors(cube__server *srv)
{
        struct rlimit rl;
        char why[512];

        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rlim_t was = rl.rlim_cur;
                rl.rlim_cur = rl.rlim_max;
                if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
                        cube__log(CUBE__LOG_INFO, "raised the soft RLIMIT_NOFILE from %llu to %llu",
                                  (unsigned long long) was, (unsigned long long) rl.rlim_cur);
        }
        srv->fd_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ?
                        rl.rlim_cur : UINT32_MAX;
        srv->fd_base = fds_open();
        if (!cube__fds_fit(srv, &srv->opts, why, sizeof(why))) {
                cube__log(CUBE__LOG_ERR, "%s", why);
                return -EMFILE;
        }
        return 0;
}

/* Opens the device and what depends on it: the properties and a fresh
 * service id, so that handles of an earlier incarnation read as foreign. */
static int open_device(cube__server *srv)
{
        cube__device_config config = {
                .index = srv->opts.device_index,
                .memory_limit = srv->opts.memory_limit,
                .kernel_timeout_ms = srv->opts.kernel_timeout_s * 1000,
                .compile_cpu_s = srv->opts.compile_limit_s,
                .compile_memory = srv->opts.compile_memory,
                .compile_output = srv->opts.compile_output,
                .compile_slots = srv->opts.build_slots,
                .complete = cube__work_complete,
                .complete_ctx = srv,
                .loop_fd = srv->device_fd,
        };
        const char *why = NULL;
        int r;

        sd_notifyf(0, "STATUS=opening %s%u", srv->driver->name, srv->opts.device_index);
        r = srv->driver->open(&config, &srv->device, &why);
        if (r < 0) {
                cube__log(CUBE__LOG_ERR, "cannot open %s%u: %s", srv->driver->name,
                          srv->opts.device_index, why ? why : strerror(-r));
                srv->device = NULL;
                return r;
        }
        srv->driver->properties(srv->device, &srv->properties);
        srv->pools = (cube__pools_device) { .driver = srv->driver, .device = srv->device,
                                            .properties = &srv->properties,
                                            .reserved = srv->pools.reserved,
                                            .reclaim = cube__reclaim_pages, .reclaim_ctx = srv };
        if (getrandom(&srv->nonce, sizeof(srv->nonce), 0) != sizeof(srv->nonce))
                srv->nonce = uv_hrtime() ^ ((uint64_t) getpid() << 32);
        snprintf(srv->service, sizeof(srv->service), "%s%u-%016" PRIx64, srv->driver->name,
                 srv->opts.device_index, srv->nonce);
        return 0;
}

/* Uses the listening socket systemd passed (socket activation), if any. */
static int listen_inherited(cube__server *srv, bool *ret_found)
{
        char **names = NULL;
        int n = sd_listen_fds_with_names(1, &names), fd = -1, r = 0;

        *ret_found = false;
        for (int i = 0; i < n; i++) {
                int cand = SD_LISTEN_FDS_START + i;
                if (fd < 0 && sd_is_socket_unix(cand, SOCK_STREAM, 1, NULL, 0) > 0 &&
                    (!names || !names[i] || strcmp(names[i], "api") == 0 || n == 1))
                        fd = cand;
                else
                        close(cand);
        }
        for (int i = 0; names && i < n; i++)
                free(names[i]);
        free(names);
        if (n < 0)
                cube__log(CUBE__LOG_WARNING, "cannot read the sockets systemd passed: %s",
                          strerror(-n));
        if (fd < 0)
                return 0;

        uv_pipe_init(srv->loop, &srv->listener, 0);
        srv->listener.data = srv;
        if ((r = uv_pipe_open(&srv->listener, fd)) < 0 ||
            (r = uv_listen((uv_stream_t *) &srv->listener, 128, cube__on_connection)) < 0) {
                cube__log(CUBE__LOG_ERR, "cannot serve the socket systemd passed: %s",
                          uv_strerror(r));
                return r;
        }
        srv->listening = true;
        srv->socket_inherited = true;
        *ret_found = true;
        return 0;
}

/* What the work asks of this layer (cubed.h): the connections, the sessions
 * and the server's life. */
static const cube__upcalls upcalls = {
        .send = cube__conn_send_fd,
        .send_small = cube__conn_send_small,
        .protocol_error = cube__conn_protocol_error,
        .hold = cube__conn_hold,
        .resume = cube__conn_resume,
        .wait_for = cube__conn_wait_for,
        .unthrottle = cube__conn_unthrottle,
        .redispatching = cube__conn_redispatching,
        .session_idle = cube__session_maybe_free,
        .check_stopped = cube__server_check_stopped,
        .poison_started = cube__server_poison_started,
        .poison_told = cube__server_poison_told,
};

int cube__server_init(cube__server *srv, cube__options *opts, char *const *overrides,
                      size_t n_overrides)
{
        uint64_t watchdog_usec = 0;
        bool inherited;
        int r;

        memset(srv, 0, sizeof(*srv));
        srv->completions_fd = srv->device_fd = -1;
        srv->disk_cache.fd = -1;
        srv->opts = *opts;
        srv->up = &upcalls;
        srv->overrides = overrides;
        srv->n_overrides = n_overrides;
        srv->loop = uv_default_loop();
        srv->started_ns = uv_hrtime();
        sd_notify(0, "STATUS=starting");
        if (cube__history_init(&srv->history, opts->history, srv->started_ns) < 0)
                return -ENOMEM;
        srv->failures.history = &srv->history;

        srv->driver = cube__driver_find(opts->backend);
        if (!srv->driver) {
                cube__log(CUBE__LOG_ERR, "unknown backend '%s'; this build has: %s", opts->backend,
                          cube__driver_names());
                srv->exit_code = CUBE__EXIT_NO_DEVICE;
                return -ENODEV;
        }
        srv->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
        if (!srv->zone)
                return -ENOMEM;
        uv_mutex_init(&srv->completions_lock);
        /* Not a uv_async: its sender and the loop spin on a shared flag,
         * which costs dearly when both share a vCPU. */
        srv->completions_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (srv->completions_fd < 0)
                return -errno;
        uv_poll_init(srv->loop, &srv->completions_poll, srv->completions_fd);
        srv->completions_poll.data = srv;
        uv_poll_start(&srv->completions_poll, UV_READABLE, on_completions);
        srv->loop_thread = uv_thread_self();
        uv_idle_init(srv->loop, &srv->local_completions);
        srv->local_completions.data = srv;
        if (srv->driver->loop_ready) {
                srv->device_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
                if (srv->device_fd < 0)
                        return -errno;
                uv_poll_init(srv->loop, &srv->device_poll, srv->device_fd);
                srv->device_poll.data = srv;
                uv_poll_start(&srv->device_poll, UV_READABLE, on_device);
        }
        if (srv->driver->loop_idle) {
                uv_prepare_init(srv->loop, &srv->device_prepare);
                srv->device_prepare.data = srv;
                uv_prepare_start(&srv->device_prepare, on_device_prepare);
                uv_unref((uv_handle_t *) &srv->device_prepare);
        }
        cube__conn_answers_init(srv);
        cube__linger_init(srv);
        cube__closer_init();
        cube__groups_init(srv);
        if ((r = open_device(srv)) < 0) {
                /* No device or driver: restarting will not bring one. */
                if (r == -ENODEV || r == -ENOSYS)
                        srv->exit_code = CUBE__EXIT_NO_DEVICE;
                return r;
        }
        srv->users.map_room = cube__map_room();
        /* Builds run on libuv's thread pool, made at its first use: one
         * thread per build slot. */
        if (!getenv("UV_THREADPOOL_SIZE")) {
                char n[16];
                snprintf(n, sizeof(n), "%u", srv->opts.build_slots);
                setenv("UV_THREADPOOL_SIZE", n, 1);
        }
        if ((r = prepare_cache_dir(srv, opts->cache_dir, &srv->cache_trusted)) < 0)
                return r;
        if ((r = cube__disk_cache_init(&srv->disk_cache, srv->disk_cache.fd, &srv->opts,
                                       srv->driver->artifact_ext, srv->started_ns)) < 0)
                return r;
        if ((r = prepare_descriptors(srv)) < 0)
                return r;

        uv_signal_init(srv->loop, &srv->sigterm);
        uv_signal_init(srv->loop, &srv->sigint);
        uv_signal_init(srv->loop, &srv->sighup);
        srv->sigterm.data = srv->sigint.data = srv->sighup.data = srv;
        uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
        uv_signal_start(&srv->sigint, on_signal, SIGINT);
        uv_signal_start(&srv->sighup, on_signal, SIGHUP);
        uv_timer_init(srv->loop, &srv->watchdog);
        uv_timer_init(srv->loop, &srv->drain_timer);
        uv_timer_init(srv->loop, &srv->poison_timer);
        uv_timer_init(srv->loop, &srv->drain_deadline);
        srv->watchdog.data = srv->drain_timer.data = srv->poison_timer.data = srv;
        srv->drain_deadline.data = srv;
        if (sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0)
                uv_timer_start(&srv->watchdog, on_watchdog, watchdog_usec / 2000 ? watchdog_usec / 2000 : 1,
                               watchdog_usec / 2000 ? watchdog_usec / 2000 : 1);

        if ((r = listen_inherited(srv, &inherited)) < 0)
                return r;
        if (!inherited && (r = cube__listen(srv, opts->socket_path)) < 0)
                return r;
        char where[sizeof(((struct sockaddr_un *) 0)->sun_path)];
        size_t where_len = sizeof(where);
        if (!inherited || uv_pipe_getsockname(&srv->listener, where, &where_len) < 0)
                snprintf(where, sizeof(where), "%s", opts->socket_path);
        cube__log_id(CUBE__MSG_START, CUBE__LOG_NOTICE, NULL, "cubed %s serving %s (%s, %" PRIu64
                     " bytes of device memory) on %s%s", CUBE_VERSION,
                     srv->service, srv->properties.name, srv->properties.memory_bytes, where,
                     inherited ? " (passed by systemd)" : "");
        return 0;
}

int cube__server_run(cube__server *srv)
{
        sd_notifyf(0, "READY=1\nSTATUS=serving %s\nMAINPID=%d", srv->service, (int) getpid());
        uv_run(srv->loop, UV_RUN_DEFAULT);
        cube__log_id(CUBE__MSG_STOP, CUBE__LOG_NOTICE, NULL, "stopped after %.1f s, exit status %d",
                     (double) (uv_hrtime() - srv->started_ns) / 1e9, srv->exit_code);
        return srv->exit_code;
}

static void close_listener(cube__server *srv)
{
        if (!srv->listening)
                return;
        uv_close((uv_handle_t *) &srv->listener, NULL);
        if (!srv->socket_inherited)
                unlink(srv->opts.socket_path);
        srv->listening = false;
}

void cube__server_stop(cube__server *srv)
{
        if (srv->stopping)
                return;
        srv->stopping = true;
        uv_timer_stop(&srv->drain_deadline);
        sd_notify(0, "STOPPING=1\nSTATUS=draining");
        close_listener(srv);
        /* Collectives wait on other daemons, up to their own timeout: they
         * fail now, and their members hear it before the connections close. */
        cube__groups_stop(srv);
        cube__kernels_stop(srv);
        cube__kernel_shapes_abandon(srv);
        cube__work_drain(srv);
        cube__conn_close_all(srv);
        uv_timer_start(&srv->drain_timer, on_drain_timeout,
                       (uint64_t) srv->opts.drain_timeout_s * 1000, 0);
        cube__server_check_stopped(srv);
}

/* Sessions that may still queue work: those a drain waits for. */
static unsigned working_sessions(const cube__server *srv)
{
        unsigned n = 0;

        for (const cube__session *s = srv->sessions; s; s = s->next)
                n += !s->admin_only;
        return n;
}

static void on_drain_deadline(uv_timer_t *t)
{
        cube__server *srv = t->data;

        cube__log_id(CUBE__MSG_STOP, CUBE__LOG_NOTICE, NULL, "the drain's deadline has passed with "
                     "%u working session(s) left: closing them and stopping", working_sessions(srv));
        cube__server_stop(srv);
}

void cube__server_drain(cube__server *srv, uint32_t timeout_s, cube__session *by)
{
        char who[96] = "a signal";

        if (srv->stopping)
                return;
        if (by)
                snprintf(who, sizeof(who), "session %" PRIu64 " (pid %d, uid %u)", by->id,
                         (int) by->pid, (unsigned) by->uid);
        /* A second drain is no error: it sets the deadline anew. */
        uv_timer_stop(&srv->drain_deadline);
        srv->drain_deadline_ns = 0;
        if (timeout_s) {
                srv->drain_deadline_ns = uv_hrtime() + (uint64_t) timeout_s * 1000000000ull;
                uv_timer_start(&srv->drain_deadline, on_drain_deadline, (uint64_t) timeout_s * 1000, 0);
        }
        cube__log_id(CUBE__MSG_STOP, CUBE__LOG_NOTICE, by, "%s asked for a drain%s: no new work; "
                     "stopping once the %u working session(s) left have ended", who,
                     srv->draining ? " again" : "", working_sessions(srv));
        if (timeout_s)
                cube__log(CUBE__LOG_NOTICE, "the drain closes what is left in %u s", timeout_s);
        srv->draining = true;
        sd_notifyf(0, "STATUS=draining: %u working session(s) left", working_sessions(srv));
        cube__server_check_stopped(srv);
}

void cube__server_undrain(cube__server *srv, cube__session *by)
{
        if (!srv->draining || srv->stopping)
                return;
        srv->draining = false;
        uv_timer_stop(&srv->drain_deadline);
        srv->drain_deadline_ns = 0;
        cube__log_id(CUBE__MSG_STOP, CUBE__LOG_NOTICE, by, "session %" PRIu64 " (pid %d, uid %u) "
                     "ended the drain: new work is taken again", by ? by->id : 0,
                     by ? (int) by->pid : 0, by ? (unsigned) by->uid : 0);
        sd_notifyf(0, "STATUS=serving %s", srv->service);
}

/* A drain is over once no working session is left and no work either. */
static bool drained(const cube__server *srv)
{
        return working_sessions(srv) == 0 && srv->inflight == 0 && srv->compiling == 0;
}

/* Everything is idle: no connection served, no session, no work, no compile. */
static bool idle(const cube__server *srv)
{
        return !cube__conn_any_active(srv) && !srv->sessions && srv->inflight == 0 &&
               srv->compiling == 0;
}

/* The device did not come up again in this process. A GPU keeps a sticky
 * fault until the process that met it ends (CUDA answers the reopen with
 * the fault again), so the reinit a person running cubed by hand counts on
 * is a fresh cubed: the same program and arguments, every session already
 * closed, the device's descriptors closed so that its driver lets go of the
 * dead context. A socket systemd passed is not ours to drop: then cubed
 * exits, and systemd starts it again. */
static void restart_process(cube__server *srv)
{
        if (srv->socket_inherited || !srv->argv) {
                srv->exit_code = 3;
                cube__server_stop(srv);
                return;
        }
        cube__log(CUBE__LOG_WARNING, "the device cannot be brought up again in this process "
                  "(its fault outlives a reset): starting cubed afresh");
        fflush(NULL);
        close_range(3, ~0u, 0);
        execv("/proc/self/exe", srv->argv);
        cube__log(CUBE__LOG_ERR, "cannot start cubed afresh (%s): stopping with status 3",
                  strerror(errno));
        fflush(NULL);
        _exit(3);
}

/* reinit, once every session is gone: the device comes up again, clean. */
static void reinit_device(cube__server *srv)
{
        srv->reinit_pending = false;
        cube__kernels_free(srv);
        cube__failures_free(&srv->failures);
        srv->failures = (cube__failures) { .minted = srv->failures.minted,
                                           .history = &srv->history };
        srv->driver->close(srv->device);
        srv->device = NULL;
        cube_error_free(srv->poison);
        srv->poison = NULL;
        if (open_device(srv) < 0) {
                restart_process(srv);
                return;
        }
        cube__log(CUBE__LOG_NOTICE, "the device was re-initialised after a fault; serving %s",
                  srv->service);
        cube__conn_start_held(srv);
        sd_notifyf(0, "STATUS=serving %s (re-initialised after a fault)", srv->service);
}

void cube__server_check_stopped(cube__server *srv)
{
        if (srv->reinit_pending && !srv->stopping && idle(srv))
                reinit_device(srv);
        if (srv->draining && !srv->stopping && drained(srv)) {
                cube__log_id(CUBE__MSG_STOP, CUBE__LOG_NOTICE, NULL, "the drain is complete: "
                             "stopping");
                cube__server_stop(srv);
        }
        if (!srv->stopping || !idle(srv))
                return;
        if (uv_is_closing((uv_handle_t *) &srv->completions_poll))
                return;
        uv_close((uv_handle_t *) &srv->completions_poll, NULL);
        uv_close((uv_handle_t *) &srv->local_completions, NULL);
        if (srv->device_fd >= 0)
                uv_close((uv_handle_t *) &srv->device_poll, NULL);
        if (srv->driver->loop_idle)
                uv_close((uv_handle_t *) &srv->device_prepare, NULL);
        cube__conn_answers_close(srv);
        cube__linger_close(srv);
        cube__groups_done(srv);
        cube__peers_done(srv);
        uv_close((uv_handle_t *) &srv->sigterm, NULL);
        uv_close((uv_handle_t *) &srv->sigint, NULL);
        uv_close((uv_handle_t *) &srv->sighup, NULL);
        uv_close((uv_handle_t *) &srv->watchdog, NULL);
        uv_close((uv_handle_t *) &srv->drain_timer, NULL);
        uv_close((uv_handle_t *) &srv->poison_timer, NULL);
        uv_close((uv_handle_t *) &srv->drain_deadline, NULL);
        cube__shares_done(srv);
}

/* The poison policy acts: the grace has passed and every session has been
 * told, or twice the grace has passed. */
static void poison_act(cube__server *srv)
{
        if (!srv->poison || srv->stopping || srv->reinit_pending)
                return;
        uv_timer_stop(&srv->poison_timer);
        if (srv->opts.poison_policy == CUBE__POISON_EXIT) {
                cube__log(CUBE__LOG_ERR, "the device is poisoned and the policy is exit: "
                          "stopping with status 3 so that the service manager restarts cubed");
                srv->exit_code = 3;
                cube__server_stop(srv);
                return;
        }
        cube__log(CUBE__LOG_WARNING, "the device is poisoned and the policy is reinit: closing "
                  "every session and bringing the device up again");
        srv->reinit_pending = true;
        cube__conn_close_all(srv);
        cube__server_check_stopped(srv);
}

static bool all_told(const cube__server *srv)
{
        for (const cube__session *x = srv->sessions; x; x = x->next)
                if (x->conn && !x->poison_told)
                        return false;
        return true;
}

static void on_poison_timeout(uv_timer_t *t)
{
        cube__server *srv = t->data;

        if (srv->poison_grace_over || all_told(srv)) {
                poison_act(srv);
                return;
        }
        /* Sessions that have not asked again get one more grace, not more:
         * the daemon does not serve a poisoned device forever. */
        srv->poison_grace_over = true;
        uv_timer_start(&srv->poison_timer, on_poison_timeout,
                       (uint64_t) srv->opts.poison_grace_s * 1000, 0);
}

void cube__server_poison_told(cube__server *srv, cube__session *s)
{
        if (!srv->poison)
                return;
        s->poison_told = true;
        if (srv->poison_grace_over && all_told(srv))
                poison_act(srv);
}

void cube__server_poison_started(cube__server *srv)
{
        srv->poison_grace_over = false;
        uv_timer_start(&srv->poison_timer, on_poison_timeout,
                       (uint64_t) srv->opts.poison_grace_s * 1000, 0);
        sd_notify(0, "STATUS=the device is poisoned");
}

static void free_value(uint64_t key, void *value, void *ctx)
{
        free(value);
}

void cube__server_done(cube__server *srv)
{
        int r;

        cube__kernels_free(srv);
        cube__disk_cache_free(&srv->disk_cache);
        if (srv->device)
                srv->driver->close(srv->device);
        srv->device = NULL;
        cube_error_free(srv->poison);
        for (int i = 0; i < CUBE__FAULT_SITES; i++)
                cube_error_free(srv->inject[i]);
        /* Anything the device completed after the loop stopped. */
        while (srv->completions_head) {
                cube__work *w = srv->completions_head;
                srv->completions_head = w->next;
                cube_error_free(w->error);
        }
        cube__failures_free(&srv->failures);
        cube__history_free(&srv->history);
        cube__idmap_foreach(&srv->users.uids, free_value, NULL);
        cube__idmap_free(&srv->users.uids);
        cube__idmap_free(&srv->exports);
        r = uv_loop_close(srv->loop);
        if (r < 0)
                cube__log(CUBE__LOG_WARNING, "the event loop still had open handles at exit");
        uv_mutex_destroy(&srv->completions_lock);
        if (srv->completions_fd >= 0)
                close(srv->completions_fd);
        if (srv->device_fd >= 0)
                close(srv->device_fd);
        if (srv->disk_cache.fd >= 0)
                close(srv->disk_cache.fd);
        if (srv->zone)
                msgpack_zone_free(srv->zone);
        cube__options_done(&srv->opts);
        uv_library_shutdown();
}
