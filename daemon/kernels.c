/*
 * kernels.c - the kernel cache every session shares, on disk and in memory.
 *
 * A kernel is compiled once for everyone: its cache key is a SHA-256 over the
 * backend, the compiler and its options (the driver's target), the front
 * end's version, the check mode and variant, the entry point and the
 * source. A source is built once for all its entry points: the front end
 * rewrites them all, and the artifact is kept in the cache directory under
 * the key without the entry point (the program), so another entry point of
 * the source, or a later run of the daemon, loads it instead of compiling;
 * an entry point whose source is being built waits for that build.
 * Compiling and loading run on libuv's thread pool; the loop only learns
 * the outcome.
 *
 * An entry lives while something references it: each kernel id a session
 * registered holds one reference, and a compile in flight holds one. Queued
 * launches, graphs and LaunchMode::Queue lists belong to a session, which
 * keeps its ids until it is freed, after its work. With the last reference
 * the source, the compile log and the device program go; the artifact stays
 * on disk for the next registration (cache.c bounds the disk).
 *
 * An artifact is code the device runs, so it is trusted only when it is
 * cube's: it is loaded only from a cache directory owned by this user with
 * mode 0700, and only when its bytes match the SHA-256 recorded beside it
 * (KEY.EXT.sha256) when it was written, reading it from the descriptor that
 * was checked (cache.c). A planted or altered one is compiled again, never
 * loaded, and the event is logged.
 *
 * Before anything is built, the kernel front end reads the source
 * (kernel-check.c): the signature (buffers, what the body does with each,
 * scalars), the checked source the backend compiles, or a refusal. A
 * kernel is checked unless a launch asks for its unchecked twin (the
 * reference's unsafe launch), a cache entry of its own; the check mode and
 * the variant are part of the key.
 *
 * Builds share a few slots (build-slots) between users: a build waits in a
 * queue, and a free slot goes to the oldest build of the user running the
 * fewest, never to a user that holds its share (uid-build-slots) already, so
 * one user's builds running to their limit leave a slot for anyone else.
 *
 * A source whose build was refused (its own fault: a compiler error, or the
 * build's limits) stays refused while the daemon runs: the last
 * CUBE__REFUSALS_KEPT refusals outlive their entries, so registering such a
 * source again answers the refusal without building it.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cubed.h"
#include "frontend.h"
#include "sha256.h"

static bool is_ident(int ch)
{
        return isalnum(ch) || ch == '_';
}

static const struct cube__refusal *refusal_of(const cube__server *srv, const char *hash)
{
        for (unsigned i = 0; i < CUBE__REFUSALS_KEPT; i++)
                if (srv->refusals[i].error && strcmp(srv->refusals[i].hash, hash) == 0)
                        return &srv->refusals[i];
        return NULL;
}

static void remember_refusal(cube__server *srv, const cube__kernel *k)
{
        struct cube__refusal *r = &srv->refusals[srv->next_refusal];
        cube_error *e;

        if (refusal_of(srv, k->hash) || !(e = cube_error_clone(k->error)))
                return;
        cube_error_free(r->error);
        memcpy(r->hash, k->hash, sizeof(r->hash));
        r->error = e;
        srv->next_refusal = (srv->next_refusal + 1) % CUBE__REFUSALS_KEPT;
}

static uint64_t hash_prefix(const char *hex)
{
        return strtoull((char[17]) { hex[0], hex[1], hex[2], hex[3], hex[4], hex[5], hex[6],
                                     hex[7], hex[8], hex[9], hex[10], hex[11], hex[12], hex[13],
                                     hex[14], hex[15], 0 }, NULL, 16);
}

static bool valid_entry(const char *entry, size_t len)
{
        if (len == 0 || len > 63 || isdigit((unsigned char) entry[0]))
                return false;
        for (size_t i = 0; i < len; i++)
                if (!is_ident((unsigned char) entry[i]))
                        return false;
        return true;
}

/* Finds or adds the entry for source and entry, checked or not. */
static cube__kernel *intern(cube__server *srv, const char *source, size_t source_len,
                            const char *entry, size_t entry_len, bool unchecked)
{
        static const char tag[] = "cube kernel v2";
        const char *variant = unchecked ? "unchecked" : "checked";
        const char *mode = cube__check_mode_name(srv->opts.check_mode);
        const char *target = srv->driver->target(srv->device);
        cube__sha256 sha;
        char hash[65];
        cube__kernel *k;

        cube__sha256_init(&sha);
        cube__sha256_update(&sha, tag, sizeof(tag));
        cube__sha256_update(&sha, srv->driver->name, strlen(srv->driver->name) + 1);
        cube__sha256_update(&sha, target, strlen(target) + 1);
        cube__sha256_update(&sha, CUBE__FRONTEND_VERSION, sizeof(CUBE__FRONTEND_VERSION));
        cube__sha256_update(&sha, mode, strlen(mode) + 1);
        cube__sha256_update(&sha, variant, strlen(variant) + 1);
        cube__sha256 program_sha = sha;
        cube__sha256_update(&sha, entry, entry_len);
        cube__sha256_update(&sha, "", 1);
        cube__sha256_update(&sha, source, source_len);
        cube__sha256_hex(&sha, hash);
        /* One build serves every entry point of a source (the front end
         * rewrites them all): its key leaves the entry point out. */
        char program[65];
        cube__sha256_update(&program_sha, source, source_len);
        cube__sha256_hex(&program_sha, program);

        for (k = cube__idmap_get(&srv->kernel_index, hash_prefix(hash)); k; k = k->next)
                if (strcmp(k->hash, hash) == 0) {
                        k->refs++;
                        return k;
                }

        k = calloc(1, sizeof(*k));
        if (!k)
                return NULL;
        memcpy(k->hash, hash, sizeof(hash));
        memcpy(k->program, program, sizeof(program));
        k->server = srv;
        k->source = strndup(source, source_len);
        k->entry = strndup(entry, entry_len);
        if (!k->source || !k->entry) {
                free(k->source);
                free(k->entry);
                free(k);
                return NULL;
        }
        k->desc.source = k->source;
        k->desc.entry = k->entry;
        k->unchecked = unchecked;
        if (!valid_entry(entry, entry_len) || strlen(k->source) != source_len)
                k->error = cube__err_text(CUBE_COMPILATION_VALIDATION, "a kernel's entry point "
                                          "must be a C identifier of at most 63 characters, and "
                                          "its source may hold no NUL byte");
        else
                k->error = cube__dialect_check(k->source);
        const struct cube__refusal *refused = k->error ? NULL : refusal_of(srv, hash);
        if (refused)
                k->error = cube_error_clone(refused->error);
        k->state = k->error ? CUBE__KERNEL_FAILED : CUBE__KERNEL_NEW;

        /* Entries sharing a hash prefix chain from the indexed one. */
        cube__kernel *first = cube__idmap_get(&srv->kernel_index, hash_prefix(hash));
        if (first) {
                k->next = first->next;
                first->next = k;
        } else if (cube__idmap_put(&srv->kernel_index, hash_prefix(hash), k) < 0) {
                free(k->source);
                free(k->entry);
                free(k->io);
                cube_error_free(k->error);
                free(k);
                return NULL;
        }
        k->all_next = srv->kernels;
        srv->kernels = k;
        srv->n_kernels++;
        k->refs = 1;
        return k;
}

cube__kernel *cube__kernel_intern(cube__server *srv, const char *source, size_t source_len,
                                  const char *entry, size_t entry_len)
{
        return intern(srv, source, source_len, entry, entry_len, false);
}

cube__kernel *cube__kernel_unchecked(cube__kernel *k)
{
        if (k->unchecked)
                return k;
        if (!k->unchecked_twin)
                k->unchecked_twin = intern(k->server, k->source, strlen(k->source), k->entry,
                                           strlen(k->entry), true);
        return k->unchecked_twin;
}

/* Frees k and what it holds; it is in no index or list any more. */
static void kernel_destroy(cube__kernel *k)
{
        if (k->module)
                k->server->driver->unload(k->server->device, k->module);
        cube__kernel_shapes_unload(k);
        cube__kernel_unref(k->unchecked_twin);
        cube__fe_facts_free(k->facts);
        free(k->checked);
        free(k->facts_text);
        cube_error_free(k->error);
        free(k->waiters);
        free(k->io);
        free(k->source);
        free(k->entry);
        free(k);
}

/* Takes k out of the index and the list of entries, and frees it. */
static void kernel_free(cube__kernel *k)
{
        cube__server *srv = k->server;
        uint64_t prefix = hash_prefix(k->hash);
        cube__kernel *first = cube__idmap_get(&srv->kernel_index, prefix);

        if (first == k) {
                cube__idmap_remove(&srv->kernel_index, prefix);
                if (k->next && cube__idmap_put(&srv->kernel_index, prefix, k->next) < 0)
                        cube__log(CUBE__LOG_WARNING, "out of host memory: kernels sharing the "
                                  "hash prefix of %.12s are registered again as new", k->hash);
        } else {
                for (cube__kernel *p = first; p; p = p->next)
                        if (p->next == k) {
                                p->next = k->next;
                                break;
                        }
        }
        for (cube__kernel **p = &srv->kernels; *p; p = &(*p)->all_next)
                if (*p == k) {
                        *p = k->all_next;
                        break;
                }
        srv->n_kernels--;
        kernel_destroy(k);
}

void cube__kernel_unref(cube__kernel *k)
{
        if (!k || --k->refs > 0 || k->state == CUBE__KERNEL_COMPILING)
                return;
        kernel_free(k);
}

/* Whether a build failure is the source's fault, which refuses the kernel
 * for good, as opposed to a defect of the machine: a CompilationError, or
 * a compiler that found the kernel asks more of the device than it has
 * (Launch(TooManyResources), as a launch of it would be answered). */
static bool source_fault(const cube_error *e)
{
        if (cube__err_family_of(cube_error_kind_of(e)) == CUBE__FAMILY_COMPILATION)
                return true;
        const cube_error *inner = cube_error_kind_of(e) == CUBE_SERVER_LAUNCH ?
                                  cube_error_source(e) : NULL;
        return inner && cube_error_kind_of(inner) == CUBE_LAUNCH_TOO_MANY_RESOURCES;
}

static char *artifact_path(const cube__kernel *k)
{
        cube__server *srv = k->server;
        size_t n = strlen(srv->opts.cache_dir) + 80;
        char *path = malloc(n);

        if (path)
                snprintf(path, n, "%s/%s.%s", srv->opts.cache_dir, k->program,
                         srv->driver->artifact_ext);
        return path;
}

static double ms_since(uint64_t start_ns)
{
        return (double) (uv_hrtime() - start_ns) / 1e6;
}

/* Whether the cache's path still names the directory held open since start:
 * one swapped in its place, or a parent swapped above it, is someone else's. */
static bool cache_intact(const cube__server *srv)
{
        struct stat held, now;

        return srv->disk_cache.fd >= 0 && fstat(srv->disk_cache.fd, &held) == 0 &&
               stat(srv->opts.cache_dir, &now) == 0 && held.st_dev == now.st_dev &&
               held.st_ino == now.st_ino;
}

cube_error *cube__kernel_load_fd(const cube__kernel *k, int fd, cube__module **ret_module,
                                 uint32_t *ret_shared_bytes)
{
        cube__server *srv = k->server;
        char path[64];

        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        return srv->driver->load(srv->device, &k->desc, path, ret_module, ret_shared_bytes);
}

static cube_error *load_fd(cube__kernel *k, int fd)
{
        return cube__kernel_load_fd(k, fd, &k->module, &k->shared_bytes);
}

/* What the parse says of the entry point becomes the kernel's signature. */
static void use_facts(cube__kernel *k)
{
        const cube__fe_facts *f = k->facts;

        k->desc.source = k->checked;
        k->desc.n_buffers = f->n_buffers;
        k->desc.uses_sync = f->uses_sync;
        k->desc.facts = f;
        free(k->io);
        k->io = calloc(f->n_buffers ? f->n_buffers : 1, sizeof(*k->io));
        /* Never written is the parse's answer; anything else the launch may
         * declare more narrowly (an output a launch says it leaves dead). */
        for (uint32_t i = 0; k->io && i < f->n_buffers; i++)
                k->io[i] = f->buffers[i].io == CUBE__PARAM_READ ? CUBE_BUFFER_READ_ONLY :
                           CUBE_BUFFER_UNDECLARED;
}

/* On the thread pool: load the artifact a run before left, if it is what
 * was written then, else compile. */
static void prepare_work(uv_work_t *w)
{
        cube__kernel *k = w->data;
        cube__server *srv = k->server;
        char *path = artifact_path(k), name[CUBE__ARTIFACT_NAME];
        bool intact = cache_intact(srv);
        cube_error *e;
        int fd;

        if (!path) {
                k->error = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_OUT_OF_MEMORY, "out of host memory preparing a kernel"));
                return;
        }
        /* The launch needs the front end's facts: kept beside an artifact
         * built before, else the front end reads the source now (and a
         * source it refuses is never built). */
        uint64_t check_start = uv_hrtime();
        bool from_cache = srv->cache_trusted && intact && cube__kernel_facts_load(k);
        if (!from_cache && (e = cube__kernel_check(k, srv->cache_trusted && intact))) {
                k->error = e;
                k->check_ms = ms_since(check_start);
                free(path);
                return;
        }
        k->check_ms = ms_since(check_start);
        use_facts(k);
        cube__artifact_name(&srv->disk_cache, k->program, name);
        if (srv->cache_trusted && !intact) {
                cube__log(CUBE__LOG_WARNING, "kernel %s (%.12s): the kernel cache %s is no "
                          "longer the directory the daemon started with (it was moved or "
                          "replaced); nothing in it is loaded, the kernel is compiled again",
                          k->entry, k->hash, srv->opts.cache_dir);
        } else if (srv->cache_trusted && (fd = cube__artifact_open(&srv->disk_cache, name, NULL)) != -ENOENT) {
                if (fd == -EPERM)
                        cube__log(CUBE__LOG_WARNING, "kernel %s (%.12s): the cached artifact "
                                  "%s is a symlink, or not a file of this user that only it may "
                                  "write (planted or swapped); it is not loaded, the kernel is "
                                  "compiled again", k->entry, k->hash, path);
                else if (fd < 0)
                        cube__log(CUBE__LOG_WARNING, "kernel %s (%.12s): the cached artifact "
                                  "%s does not match the digest recorded when it was written "
                                  "(planted or altered); it is not loaded, the kernel is "
                                  "compiled again", k->entry, k->hash, path);
                if (fd >= 0) {
                        e = load_fd(k, fd);
                        if (!e) {
                                cube__artifact_touch(fd);
                                close(fd);
                                k->from_disk = true;
                                free(path);
                                return;
                        }
                        close(fd);
                        cube__log(CUBE__LOG_WARNING, "kernel %s (%.12s): the cached artifact "
                                  "%s was not loaded (%s); the kernel is compiled again",
                                  k->entry, k->hash, path,
                                  cube_error_message(cube_error_root(e)));
                        cube_error_free(e);
                }
        }

        /* A cache that is no longer ours gets nothing: the build goes to a
         * private directory of its own, loaded from there and removed. */
        char scratch[] = "/tmp/cube-kernel-XXXXXX", *built = path;
        if (!intact) {
                built = NULL;
                if (mkdtemp(scratch) && asprintf(&built, "%s/%s", scratch, name) < 0)
                        built = NULL;
                if (!built) {
                        k->error = cube__err_wrap(CUBE_SERVER_IO, cube__err_text(
                                CUBE_IO_UNKNOWN, "no private directory to build kernel %s "
                                "in, the kernel cache being no longer the daemon's: %s",
                                k->entry, strerror(errno)));
                        (void) rmdir(scratch);
                        free(path);
                        return;
                }
        }
        /* Facts from the cache come without the checked source a build needs. */
        if (!k->checked) {
                if ((e = cube__kernel_check(k, intact))) {
                        k->error = e;
                        if (built != path) {
                                (void) rmdir(scratch);
                                free(built);
                        }
                        free(path);
                        return;
                }
                use_facts(k);
        }
        uint64_t start = uv_hrtime();
        e = srv->driver->compile(srv->device, &k->desc, built);
        if (!e && intact) {
                /* What was built is loaded from the descriptor its digest was
                 * taken from. */
                fd = cube__artifact_seal(&srv->disk_cache, name, k->entries, k->source,
                                         &k->artifact_bytes);
                if (fd >= 0) {
                        e = load_fd(k, fd);
                        k->stored = true;       /* on disk, loadable or not */
                        close(fd);
                        if (!e)
                                cube__kernel_facts_store(k);
                } else {
                        e = cube__err_wrap(CUBE_SERVER_IO, cube__err_text(
                                CUBE_IO_UNKNOWN, "the compiled kernel %s could not be "
                                "opened in the cache directory: %s", name, strerror(-fd)));
                }
        } else if (!e) {
                e = srv->driver->load(srv->device, &k->desc, built, &k->module, &k->shared_bytes);
        }
        if (built != path) {
                (void) unlink(built);
                (void) rmdir(scratch);
                free(built);
        }
        k->compile_ms = ms_since(start);
        k->error = e;
        free(path);
}

static void build_schedule(cube__server *srv, cube__kernel *asking);

/* A build takes its slot, or gives it back: the running builds are few
 * (build-slots), and a list of them is what sibling_building walks. */
static void build_slot_take(cube__server *srv, cube__kernel *k)
{
        cube__uid *u = cube__uid_get(&srv->users, k->build_uid);

        srv->builds_running++;
        if (u)
                u->builds++;
        k->running_next = srv->running_builds;
        if (k->running_next)
                k->running_next->running_prev = &k->running_next;
        k->running_prev = &srv->running_builds;
        srv->running_builds = k;
}

static void build_slot_give(cube__server *srv, cube__kernel *k)
{
        cube__uid *u = cube__idmap_get(&srv->users.uids, k->build_uid);

        if (!k->running_prev)
                return;
        srv->builds_running--;
        if (u)
                u->builds--;
        *k->running_prev = k->running_next;
        if (k->running_next)
                k->running_next->running_prev = k->running_prev;
        k->running_prev = NULL;
        k->running_next = NULL;
}

/* status is 0 once the work ran, UV_ECANCELED for a build never started. */
static void prepare_done(uv_work_t *w, int status)
{
        cube__kernel *k = w->data;
        cube__server *srv = k->server;
        cube__kernel_waiter *waiters = k->waiters;
        size_t n = k->n_waiters;

        build_slot_give(srv, k);
        srv->compiling--;
        if (k->pinned)
                cube__disk_cache_unpin(&srv->disk_cache, k->program, k->from_disk);
        k->pinned = false;
        if (k->stored)
                cube__disk_cache_stored(&srv->disk_cache, k->program, k->artifact_bytes);
        k->stored = false;
        if (status == 0 && !k->from_disk && (k->module || k->error)) {
                srv->compiles++;
                cube__hist_observe(&srv->stats.compile, k->compile_ms / 1e3);
        }
        k->state = k->module ? CUBE__KERNEL_READY : CUBE__KERNEL_FAILED;
        if (!k->module && !k->error)
                k->error = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_UNKNOWN, "the kernel was not built, and the backend said "
                        "nothing of why"));
        k->retry = k->error && !source_fault(k->error);
        if (k->error && !k->retry && status == 0)
                remember_refusal(srv, k);
        if (k->error)
                cube__log(k->retry ? CUBE__LOG_WARNING : CUBE__LOG_INFO, "kernel %s (%.12s) "
                          "failed to build%s: %s", k->entry, k->hash,
                          k->retry ? " (not the source's fault: a later launch tries again)" : "",
                          cube_error_message(k->error));
        else
                cube__log(CUBE__LOG_INFO, "kernel %s (%.12s) %s in %.1f ms", k->entry, k->hash,
                          k->from_disk ? "loaded from the cache" : "compiled", k->compile_ms);
        k->waiters = NULL;
        k->n_waiters = 0;
        for (size_t i = 0; i < n; i++)
                waiters[i].ready(waiters[i].ctx);
        free(waiters);
        cube__kernel_unref(k);          /* the compile's reference */
        build_schedule(srv, NULL);
        srv->up->check_stopped(srv);
}

static unsigned build_slots(const cube__server *srv)
{
        return srv->opts.build_slots ? srv->opts.build_slots : 1;
}

bool cube__kernel_build_slot_idle(const cube__server *srv)
{
        return !srv->stopping && !srv->build_queue && srv->builds_running < build_slots(srv);
}

/* The slots one user's builds may hold at once: all but one by default, so
 * another user's build always finds one. */
static unsigned uid_build_slots(const cube__server *srv)
{
        unsigned slots = build_slots(srv);
        unsigned share = srv->opts.uid_build_slots ? srv->opts.uid_build_slots : slots - 1;

        return share ? share : 1;
}

/* Hands k's build to the thread pool. A build that cannot be queued fails
 * as a defect; the kernel being asked for (notify false) says so to its
 * caller, which then waits for nothing. */
static bool build_start(cube__kernel *k, bool notify)
{
        cube__server *srv = k->server;

        build_slot_take(srv, k);
        if (uv_queue_work(srv->loop, &k->work, prepare_work, prepare_done) == 0)
                return true;
        k->error = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN,
                                                                     "could not queue the compile"));
        if (notify) {
                prepare_done(&k->work, UV_ECANCELED);
                return false;
        }
        build_slot_give(srv, k);
        srv->compiling--;
        k->refs--;
        if (k->pinned)
                cube__disk_cache_unpin(&srv->disk_cache, k->program, false);
        k->pinned = false;
        k->state = CUBE__KERNEL_FAILED;
        k->retry = true;
        free(k->waiters);
        k->waiters = NULL;
        k->n_waiters = 0;
        return false;
}

/* Whether another entry point of k's source is being built: k waits for
 * that build, whose artifact it then loads, so a source is built once. */
static bool sibling_building(const cube__server *srv, const cube__kernel *k)
{
        for (const cube__kernel *o = srv->running_builds; o; o = o->running_next)
                if (o != k && strcmp(o->program, k->program) == 0)
                        return true;
        return false;
}

/* Starts queued builds while slots are free: each time the oldest of the
 * user running the fewest, as long as that user is below its share. */
static void build_schedule(cube__server *srv, cube__kernel *asking)
{
        unsigned slots = build_slots(srv);
        unsigned share = uid_build_slots(srv);

        if (srv->stopping)
                return;
        while (srv->builds_running < slots && srv->build_queue) {
                cube__kernel **best = NULL, *k;
                uint32_t fewest = UINT32_MAX;
                for (cube__kernel **p = &srv->build_queue; *p; p = &(*p)->build_next) {
                        const cube__uid *u = cube__idmap_get(&srv->users.uids, (*p)->build_uid);
                        uint32_t running = u ? u->builds : 0;
                        if (running < fewest && !sibling_building(srv, *p)) {
                                best = p;
                                fewest = running;
                        }
                }
                if (!best || fewest >= share)
                        return;
                k = *best;
                *best = k->build_next;
                k->build_next = NULL;
                build_start(k, k != asking);
        }
}

void cube__kernel_builds_resume(cube__server *srv)
{
        build_schedule(srv, NULL);
}

void cube__kernels_stop(cube__server *srv)
{
        while (srv->build_queue) {
                cube__kernel *k = srv->build_queue;
                srv->build_queue = k->build_next;
                k->build_next = NULL;
                k->error = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_UNKNOWN, "the daemon is stopping: kernel %s was not built",
                        k->entry));
                prepare_done(&k->work, UV_ECANCELED);
        }
}

bool cube__kernel_prepare(cube__kernel *k, const cube__kernel_waiter *waiter)
{
        cube__server *srv = k->server;

        if (k->state == CUBE__KERNEL_READY || k->state == CUBE__KERNEL_FAILED)
                return false;
        if (waiter) {
                cube__kernel_waiter *grown = realloc(k->waiters,
                                                     (k->n_waiters + 1) * sizeof(*grown));
                if (!grown)
                        return false;
                k->waiters = grown;
                k->waiters[k->n_waiters++] = *waiter;
        }
        if (k->state == CUBE__KERNEL_NEW && (k->error = cube__inject_take(srv, CUBE_FAULT_COMPILE))) {
                k->state = CUBE__KERNEL_FAILED;
                k->retry = !source_fault(k->error);
                free(k->waiters);
                k->waiters = NULL;
                k->n_waiters = 0;
                return false;
        }
        if (k->state == CUBE__KERNEL_NEW) {
                k->state = CUBE__KERNEL_COMPILING;
                k->work.data = k;
                k->refs++;              /* held until prepare_done */
                k->pinned = cube__disk_cache_pin(&srv->disk_cache, k->program);
                srv->compiling++;
                k->build_uid = srv->asking_uid;
                cube__kernel **tail = &srv->build_queue;
                while (*tail)
                        tail = &(*tail)->build_next;
                *tail = k;
                build_schedule(srv, k);
                if (k->state == CUBE__KERNEL_FAILED)
                        return false;
        }
        return true;
}

void cube__kernel_retry(cube__kernel *k)
{
        if (k->state != CUBE__KERNEL_FAILED || !k->retry)
                return;
        cube_error_free(k->error);
        k->error = NULL;
        k->retry = false;
        k->state = CUBE__KERNEL_NEW;
}

void cube__kernel_forget(cube__kernel *k, void *ctx)
{
        size_t m = 0;

        for (size_t i = 0; i < k->n_waiters; i++)
                if (k->waiters[i].ctx != ctx)
                        k->waiters[m++] = k->waiters[i];
        k->n_waiters = m;
}

cube_error *cube__kernel_launch_error(const cube__kernel *k)
{
        if (cube__err_family_of(cube_error_kind_of(k->error)) != CUBE__FAMILY_COMPILATION)
                return cube_error_clone(k->error);
        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_wrap(CUBE_LAUNCH_COMPILATION_ERROR,
                                                                 cube_error_clone(k->error)));
}

void cube__kernels_free(cube__server *srv)
{
        for (cube__kernel *k = srv->kernels, *next; k; k = next) {
                next = k->all_next;
                kernel_destroy(k);
        }
        srv->kernels = NULL;
        srv->n_kernels = 0;
        for (unsigned i = 0; i < CUBE__REFUSALS_KEPT; i++) {
                cube_error_free(srv->refusals[i].error);
                srv->refusals[i].error = NULL;
        }
        cube__idmap_free(&srv->kernel_index);
}
