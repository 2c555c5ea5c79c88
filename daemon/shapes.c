/*
 * shapes.c - a kernel built again for the cube dimension it runs with.
 *
 * A device whose generated code is faster when it knows the cube's
 * dimension (the CPU device: PoCL's work-group functions, specialised per
 * local size) gets, per kernel, a second build for each of the first
 * CUBE__SHAPES cube dimensions it is launched with, off the critical path:
 * on the thread pool, in a build slot that no compile is waiting for, its
 * artifact kept in the kernel cache under its own key (the kernel's and the
 * dimension's). Until it is loaded, launches run the kernel's own module;
 * from then on, launches of that dimension run the specialised one. A
 * launch never waits for it.
 *
 * A second build costs as much as the first, so it is made only where it
 * pays: once launches of that dimension have run CUBE__SHAPE_AFTER_NS of
 * device time with the generic code (shape_counts: the part of it their
 * code could cut). A kernel launched a few times in a test, or for
 * launches whose cost is the launch itself, is never built twice; one that
 * carries a workload is, after its first tens of milliseconds, whether in a
 * few long launches or in many brief ones. A
 * build that fails leaves the generic module in use for that dimension, and
 * is logged. The first CUBE__SHAPES dimensions a kernel is launched with
 * hold its places, whether their launches come to carry work or not.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cubed.h"
#include "sha256.h"

#define CUBE__SHAPE_AFTER_NS (20ull * 1000 * 1000)
/* Launches at least this long count in full. */
#define CUBE__SHAPE_LONG_NS (50ull * 1000)
/* What a launch costs the device whatever its code (PoCL's own work for a
 * command: an empty launch takes 0.7-0.8 us here), which no code for the
 * cube can cut. */
#define CUBE__SHAPE_LAUNCH_NS 1000ull

typedef struct shape_job {
        uv_work_t work;
        cube__kernel *k;
        unsigned i;                     /* k->shapes[i] */
        uint32_t dim[3];
        char key[65];                   /* the artifact's key in the disk cache */
        bool pinned, stored, from_disk;
        uint64_t bytes;
        double ms;
        cube__module *module;
        cube_error *error;
} shape_job;

static cube__shape *shape_of(cube__kernel *k, const uint32_t dim[3])
{
        for (unsigned i = 0; i < k->n_shapes; i++)
                if (memcmp(k->shapes[i].dim, dim, sizeof(k->shapes[i].dim)) == 0)
                        return &k->shapes[i];
        return NULL;
}

cube__module *cube__kernel_module_for(cube__kernel *k, const uint32_t dim[3], bool *ret_count)
{
        cube__shape *s;

        *ret_count = false;
        if (!k->server->driver->compile_shape || k->state != CUBE__KERNEL_READY)
                return k->module;
        if (!(s = shape_of(k, dim))) {
                if (k->n_shapes == CUBE__SHAPES)
                        return k->module;
                s = &k->shapes[k->n_shapes++];
                *s = (cube__shape) { .state = CUBE__SHAPE_COUNTING, .brief_ns = UINT64_MAX };
                memcpy(s->dim, dim, sizeof(s->dim));
        }
        if (s->state == CUBE__SHAPE_READY)
                return s->module;
        *ret_count = s->state == CUBE__SHAPE_COUNTING;
        return k->module;
}

/* Loads the artifact fd holds (opened through the cache directory and
 * checked there) and closes fd; a load that fails leaves its error in j. */
static void shape_load_artifact(shape_job *j, int fd)
{
        uint32_t shared;

        j->error = cube__kernel_load_fd(j->k, fd, &j->module, &shared);
        if (!j->error && j->from_disk)
                cube__artifact_touch(fd);
        close(fd);
}

/* On the thread pool: loads the artifact a run before left, or builds it. */
static void shape_work(uv_work_t *w)
{
        shape_job *j = w->data;
        cube__kernel *k = j->k;
        cube__server *srv = k->server;
        char name[CUBE__ARTIFACT_NAME];
        uint64_t start = uv_hrtime();
        int fd;

        cube__artifact_name(&srv->disk_cache, j->key, name);
        if (j->pinned && (fd = cube__artifact_open(&srv->disk_cache, name, NULL)) >= 0) {
                j->from_disk = true;
                shape_load_artifact(j, fd);
                if (!j->error)
                        return;
                j->from_disk = false;
                cube_error_free(j->error);
                j->error = NULL;
        }
        /* An artifact that would not load, of a kernel whose facts came from
         * the cache: there is no source to build it from. */
        if (!k->checked) {
                j->error = cube__err_generic("the kernel's source was not read in this run");
                return;
        }
        size_t n = strlen(srv->opts.cache_dir) + strlen(name) + 2;
        char *built = malloc(n);
        if (!built) {
                j->error = cube__err_generic("out of host memory");
                return;
        }
        snprintf(built, n, "%s/%s", srv->opts.cache_dir, name);
        j->error = srv->driver->compile_shape(srv->device, &k->desc, j->dim, built,
                                              &srv->shapes_abandoned);
        free(built);
        if (!j->error) {
                fd = cube__artifact_seal(&srv->disk_cache, name, k->entry, k->source, &j->bytes);
                if (fd < 0) {
                        j->error = cube__err_generic("the built artifact could not be opened "
                                                     "in the cache directory");
                } else {
                        j->stored = true;
                        shape_load_artifact(j, fd);
                }
        }
        j->ms = (double) (uv_hrtime() - start) / 1e6;
}

static void shape_done(uv_work_t *w, int status)
{
        shape_job *j = w->data;
        cube__kernel *k = j->k;
        cube__server *srv = k->server;
        cube__shape *s = &k->shapes[j->i];

        srv->builds_running--;
        srv->compiling--;
        if (j->pinned)
                cube__disk_cache_unpin(&srv->disk_cache, j->key, j->from_disk);
        if (j->stored)
                cube__disk_cache_stored(&srv->disk_cache, j->key, j->bytes);
        if (status == 0 && j->module) {
                s->module = j->module;
                s->state = CUBE__SHAPE_READY;
                cube__log(CUBE__LOG_INFO, "kernel %s (%.12s) for cubes of %ux%ux%u %s in %.1f ms",
                          k->entry, k->hash, j->dim[0], j->dim[1], j->dim[2],
                          j->from_disk ? "loaded from the cache" : "built", j->ms);
        } else if (atomic_load(&srv->shapes_abandoned)) {
                s->state = CUBE__SHAPE_FAILED;
                cube__log(CUBE__LOG_INFO, "kernel %s (%.12s) for cubes of %ux%ux%u: the build "
                          "was abandoned, as the daemon stops", k->entry, k->hash, j->dim[0],
                          j->dim[1], j->dim[2]);
        } else {
                s->state = CUBE__SHAPE_FAILED;
                cube__log(CUBE__LOG_WARNING, "kernel %s (%.12s) for cubes of %ux%ux%u was not "
                          "built; its launches keep the generic code: %s", k->entry, k->hash,
                          j->dim[0], j->dim[1], j->dim[2],
                          j->error ? cube_error_message(j->error) : "the build was cancelled");
        }
        cube_error_free(j->error);
        free(j);
        cube__kernel_unref(k);          /* the build's reference */
        cube__kernel_builds_resume(srv);
        srv->up->check_stopped(srv);
}

/* Starts the build of k's shape s, if a build slot is free: one that a
 * compile someone waits for would have taken already. */
static void shape_build(cube__kernel *k, cube__shape *s)
{
        cube__server *srv = k->server;
        cube__sha256 sha;
        shape_job *j;

        if (!srv->cache_trusted || atomic_load(&srv->shapes_abandoned)) {
                s->state = CUBE__SHAPE_FAILED;  /* nowhere to keep it, or no one to run it */
                return;
        }
        if (!cube__kernel_build_slot_idle(srv))
                return;                         /* a later launch asks again */
        if (!(j = calloc(1, sizeof(*j))))
                return;
        j->k = k;
        j->i = (unsigned) (s - k->shapes);
        memcpy(j->dim, s->dim, sizeof(j->dim));
        cube__sha256_init(&sha);
        cube__sha256_update(&sha, "cube shape v1", 14);
        cube__sha256_update(&sha, k->hash, strlen(k->hash) + 1);
        cube__sha256_update(&sha, s->dim, sizeof(s->dim));
        cube__sha256_hex(&sha, j->key);
        j->pinned = cube__disk_cache_pin(&srv->disk_cache, j->key);
        /* Facts from the disk cache come without the source a build needs:
         * such a kernel uses what an earlier run built, or nothing. */
        if (!j->pinned && !k->checked) {
                cube__disk_cache_unpin(&srv->disk_cache, j->key, false);
                free(j);
                s->state = CUBE__SHAPE_FAILED;
                return;
        }
        j->work.data = j;
        if (uv_queue_work(srv->loop, &j->work, shape_work, shape_done) != 0) {
                if (j->pinned)
                        cube__disk_cache_unpin(&srv->disk_cache, j->key, false);
                free(j);
                return;
        }
        s->state = CUBE__SHAPE_BUILDING;
        k->refs++;
        srv->compiling++;
        srv->builds_running++;
}

/* What a launch of s that took ns counts toward its build. A brief launch
 * counts as the briefest of s's so far, less CUBE__SHAPE_LAUNCH_NS. Its
 * own time is mostly noise: a device preempted in the middle of an empty
 * launch makes it 25 us, and on two CPUs up to a quarter of empty launches
 * take 1-2 us; counted, they had a kernel that only ever runs empty
 * launches built after a million of them, for nothing. Noise only ever
 * adds, so the least time is what the launch's code took. Leaving brief
 * launches out instead would never build a kernel launched over and over
 * for a few microseconds, whose generic code can take twice the time. */
static uint64_t shape_counts(cube__shape *s, uint64_t ns)
{
        if (ns >= CUBE__SHAPE_LONG_NS)
                return ns;
        if (ns < s->brief_ns)
                s->brief_ns = ns;
        return s->brief_ns > CUBE__SHAPE_LAUNCH_NS ? s->brief_ns - CUBE__SHAPE_LAUNCH_NS : 0;
}

void cube__kernel_shape_ran(cube__kernel *k, const uint32_t dim[3], uint64_t ns)
{
        cube__shape *s = shape_of(k, dim);

        if (s && s->state == CUBE__SHAPE_COUNTING &&
            (s->device_ns += shape_counts(s, ns)) >= CUBE__SHAPE_AFTER_NS)
                shape_build(k, s);
        cube__kernel_unref(k);          /* the launch's reference */
}

void cube__kernel_shapes_abandon(cube__server *srv)
{
        atomic_store(&srv->shapes_abandoned, true);
}

void cube__kernel_shapes_unload(cube__kernel *k)
{
        for (unsigned i = 0; i < k->n_shapes; i++)
                if (k->shapes[i].module)
                        k->server->driver->unload(k->server->device, k->shapes[i].module);
}
