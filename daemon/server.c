/*
 * server.c - the daemon's life: bring the device up, serve, and stop cleanly.
 *
 * Stopping is a drain, not an abort: the listener closes, every connection
 * closes, work already on the device completes, every session's memory is
 * reclaimed, and only then does the loop end. SIGTERM therefore exits 0 with
 * nothing leaked and the socket file removed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "cubed.h"

static void on_completions(uv_async_t *a)
{
        cube__server_drain_completions(a->data);
}

static void on_signal(uv_signal_t *sig, int signum)
{
        cube__server *srv = sig->data;

        cube__log(CUBE__LOG_NOTICE, "%s received: draining and stopping",
                  signum == SIGTERM ? "SIGTERM" : "SIGINT");
        cube__server_stop(srv);
}

/* Creates the kernel cache directory if needed, and refuses one that others
 * may write: the daemon loads code from it. */
static int prepare_cache_dir(const char *dir)
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
        if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
                cube__log(CUBE__LOG_ERR, "the kernel cache %s is not a directory", dir);
                return -ENOTDIR;
        }
        if (st.st_uid != geteuid() || (st.st_mode & 022)) {
                cube__log(CUBE__LOG_ERR, "the kernel cache %s must be owned by this user and "
                          "writable by no one else (it holds code the daemon loads); fix it "
                          "with chown and chmod 0700", dir);
                return -EPERM;
        }
        return 0;
}

int cube__server_init(cube__server *srv, const cube__options *opts)
{
        cube__device_config config;
        const char *why = NULL;
        int r;

        memset(srv, 0, sizeof(*srv));
        srv->opts = *opts;
        srv->loop = uv_default_loop();
        srv->started_ns = uv_hrtime();

        srv->driver = cube__driver_find(opts->backend);
        if (!srv->driver) {
                cube__log(CUBE__LOG_ERR, "unknown backend '%s'; this build has: cpu", opts->backend);
                return -ENODEV;
        }
        if (getrandom(&srv->nonce, sizeof(srv->nonce), 0) != sizeof(srv->nonce))
                srv->nonce = uv_hrtime() ^ ((uint64_t) getpid() << 32);
        snprintf(srv->service, sizeof(srv->service), "%s%u-%016" PRIx64, srv->driver->name,
                 opts->device_index, srv->nonce);

        uv_mutex_init(&srv->completions_lock);
        uv_async_init(srv->loop, &srv->completions_async, on_completions);
        srv->completions_async.data = srv;

        config = (cube__device_config) {
                .index = opts->device_index,
                .memory_limit = opts->memory_limit,
                .complete = cube__server_complete,
                .complete_ctx = srv,
        };
        r = srv->driver->open(&config, &srv->device, &why);
        if (r < 0) {
                cube__log(CUBE__LOG_ERR, "cannot open %s%u: %s", srv->driver->name,
                          opts->device_index, why ? why : strerror(-r));
                return r;
        }
        srv->driver->properties(srv->device, &srv->properties);
        r = prepare_cache_dir(opts->cache_dir);
        if (r < 0)
                return r;

        uv_signal_init(srv->loop, &srv->sigterm);
        uv_signal_init(srv->loop, &srv->sigint);
        srv->sigterm.data = srv->sigint.data = srv;
        uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
        uv_signal_start(&srv->sigint, on_signal, SIGINT);

        r = cube__listen(srv, opts->socket_path);
        if (r < 0)
                return r;
        cube__log(CUBE__LOG_NOTICE, "serving %s (%s, %" PRIu64 " bytes of device memory) on %s",
                  srv->service, srv->properties.name, srv->properties.memory_bytes,
                  opts->socket_path);
        return 0;
}

int cube__server_run(cube__server *srv)
{
        sd_notifyf(0, "READY=1\nSTATUS=serving %s on %s\nMAINPID=%d", srv->service,
                   srv->opts.socket_path, (int) getpid());
        return uv_run(srv->loop, UV_RUN_DEFAULT);
}

void cube__server_stop(cube__server *srv)
{
        if (srv->stopping)
                return;
        srv->stopping = true;
        sd_notify(0, "STOPPING=1\nSTATUS=draining");
        if (srv->listening) {
                uv_close((uv_handle_t *) &srv->listener, NULL);
                unlink(srv->opts.socket_path);
                srv->listening = false;
        }
        cube__conn_close_all(srv);
        cube__server_check_stopped(srv);
}

void cube__server_check_stopped(cube__server *srv)
{
        if (!srv->stopping || srv->conns || srv->sessions || srv->inflight > 0 || srv->compiling > 0)
                return;
        if (uv_is_closing((uv_handle_t *) &srv->completions_async))
                return;
        uv_close((uv_handle_t *) &srv->completions_async, NULL);
        uv_close((uv_handle_t *) &srv->sigterm, NULL);
        uv_close((uv_handle_t *) &srv->sigint, NULL);
}

void cube__server_done(cube__server *srv)
{
        int r;

        cube__kernels_free(srv);
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
        r = uv_loop_close(srv->loop);
        if (r < 0)
                cube__log(CUBE__LOG_WARNING, "the event loop still had open handles at exit");
        uv_mutex_destroy(&srv->completions_lock);
        uv_library_shutdown();
}
