/*
 * device-graphs.c - the graphs cube-device keeps (queue.h's CUBE__MSG_GRAPH).
 *
 * cubed sends a captured graph's launches once; the control thread builds
 * each into a kernel object of its own, its arguments set then, and a
 * replay, one slot of the ring, only queues them. A graph that could not be
 * built is kept all the same, so that its replays fail saying why.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "device.h"
#include "frontend.h"
#include "io.h"
#include "queue.h"

/* One launch of a kept graph: a kernel object of its own, its arguments set
 * once, when the graph is built; a replay only queues it. */
typedef struct glaunch {
        cl_kernel kernel;
        size_t global[3], local[3];
        bool in_line;
        size_t info_at;                 /* its info words in the graph's, its
                                         * buffers' places just before them */
        uint32_t n_info;
        cube__launch_arg cell;          /* a looped kernel's launch words */
} glaunch;

typedef struct dgraph {
        uint32_t id;
        uint32_t n;
        glaunch *launches;
        uint64_t *words;                /* every launch's buffers' places and info words */
        char why[CUBE__Q_REASON];       /* not empty: it could not be built */
        struct dgraph *next;
} dgraph;

static struct {
        pthread_mutex_t lock;
        pthread_cond_t built;           /* a graph was added */
        dgraph *head;
} graphs = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL };

static void dgraph_free(dgraph *g)
{
        if (!g)
                return;
        for (uint32_t i = 0; g->launches && i < g->n; i++)
                if (g->launches[i].kernel)
                        clReleaseKernel(g->launches[i].kernel);
        free(g->words);
        free(g->launches);
        free(g);
}

/* Builds the launches of a CUBE__MSG_GRAPH into g, or says in g->why why it
 * cannot (what it built stays, for dgraph_free). The records were written by
 * cubed, but are read as if they were not: every count is checked against
 * what arrived. */
static void dgraph_build(dgraph *g, const char *payload, size_t len)
{
        const char *p = payload, *end = payload + len;
        uint64_t *words = NULL;
        size_t n_words = 0;
        cl_int err = CL_SUCCESS;

        if (!(g->launches = calloc(g->n ? g->n : 1, sizeof(*g->launches)))) {
                snprintf(g->why, sizeof(g->why), "out of memory");
                return;
        }
        /* The words first: one buffer for the whole graph, each launch's
         * laid out as in a slot of the ring. */
        for (const char *q = p; q < end;) {
                cube__qlaunch r;
                if ((size_t) (end - q) < sizeof(r))
                        break;
                memcpy(&r, q, sizeof(r));
                q += sizeof(r) + ((size_t) r.n_buffers + r.n_info) * 8;
                n_words += (size_t) r.n_buffers + r.n_info;
        }
        if (!(words = calloc(n_words ? n_words : 1, 8))) {
                snprintf(g->why, sizeof(g->why), "out of memory");
                return;
        }
        size_t at_word = 0;
        for (uint32_t i = 0; i < g->n; i++) {
                cube__qlaunch r;
                cl_kernel k = NULL;
                if ((size_t) (end - p) < sizeof(r) ||
                    (memcpy(&r, p, sizeof(r)), r.n_buffers + (uint64_t) r.n_info >
                     CUBE__Q_SLOT_WORDS) ||
                    (size_t) (end - p) - sizeof(r) < ((size_t) r.n_buffers + r.n_info) * 8) {
                        snprintf(g->why, sizeof(g->why), "launch %u of the graph is cut short", i);
                        break;
                }
                const uint64_t *data = (const uint64_t *) (const void *) (p + sizeof(r));
                bool looped = false;
                pthread_mutex_lock(&cube__dev.lock);
                if (r.module < cube__dev.n_modules && cube__dev.modules[r.module].program &&
                    cube__dev.modules[r.module].n_buffers == r.n_buffers) {
                        k = clCreateKernel(cube__dev.modules[r.module].program,
                                           cube__dev.modules[r.module].name, &err);
                        looped = cube__dev.modules[r.module].looped;
                }
                pthread_mutex_unlock(&cube__dev.lock);
                if (!k) {
                        snprintf(g->why, sizeof(g->why), "launch %u of the graph names no loaded "
                                 "kernel", i);
                        break;
                }
                glaunch *l = &g->launches[i];
                l->kernel = k;
                l->in_line = cube__dev_runs_inline(&r);
                pthread_mutex_lock(&cube__dev.lock);
                uint32_t outside = cube__dev_place_buffers(data, r.n_buffers, words + at_word);
                pthread_mutex_unlock(&cube__dev.lock);
                if (outside < r.n_buffers) {
                        snprintf(g->why, sizeof(g->why), "launch %u of the graph: buffer %u lies "
                                 "outside device memory", i, outside);
                        break;
                }
                at_word += r.n_buffers;
                memcpy(words + at_word, data + r.n_buffers, (size_t) r.n_info * 8);
                l->info_at = at_word;
                l->n_info = r.n_info;
                err = cube__dev_launch_args(k, NULL, looped, &r, at_word, &l->cell, l->global,
                                            l->local);
                if (!looped)
                        err |= cube__dev_buffer_args(k, NULL, &r, words + at_word - r.n_buffers);
                if (err != CL_SUCCESS) {
                        snprintf(g->why, sizeof(g->why), "launch %u of the graph: the OpenCL "
                                 "runtime refused its arguments (%d)", i, err);
                        break;
                }
                at_word += r.n_info;
                p += sizeof(r) + ((size_t) r.n_buffers + r.n_info) * 8;
        }
        /* The graph keeps its words: its checked launches write their
         * out-of-bounds records there. */
        g->words = words;
        for (uint32_t i = 0; !*g->why && i < g->n; i++)
                if ((err = clSetKernelArgSVMPointer(g->launches[i].kernel, 0, words)))
                        snprintf(g->why, sizeof(g->why), "launch %u of the graph: the OpenCL "
                                 "runtime refused its info words (%d)", i, err);
}

/* CUBE__MSG_GRAPH builds a graph (kept even when it could not be built, so
 * that its replays fail saying why); CUBE__MSG_GRAPH_FREE drops one, which
 * cubed sends only once no replay of it is in the ring. */
void cube__dev_graph_message(const cube__msg *m, const char *payload)
{
        dgraph *g;

        if (m->type == CUBE__MSG_GRAPH_FREE) {
                pthread_mutex_lock(&graphs.lock);
                for (dgraph **at = &graphs.head; *at; at = &(*at)->next)
                        if ((*at)->id == m->id) {
                                g = *at;
                                *at = g->next;
                                pthread_mutex_unlock(&graphs.lock);
                                dgraph_free(g);
                                return;
                        }
                pthread_mutex_unlock(&graphs.lock);
                return;
        }
        if (!(g = calloc(1, sizeof(*g))))
                syscall(SYS_exit_group, 0);     /* its replays could not be told */
        g->id = m->id;
        g->n = m->n_buffers <= CUBE__QG_LAUNCHES ? m->n_buffers : 0;
        if (g->n == 0)
                snprintf(g->why, sizeof(g->why), "a graph of %u launches", m->n_buffers);
        else
                dgraph_build(g, payload, m->len);
        pthread_mutex_lock(&graphs.lock);
        g->next = graphs.head;
        graphs.head = g;
        pthread_cond_broadcast(&graphs.built);
        pthread_mutex_unlock(&graphs.lock);
}

/* The graph a replay names, once the control thread has built it (cubed
 * sends it before any replay of it). */
static dgraph *graph_get(uint32_t id)
{
        dgraph *g;

        pthread_mutex_lock(&graphs.lock);
        for (;;) {
                for (g = graphs.head; g && g->id != id; g = g->next)
                        ;
                if (g)
                        break;
                pthread_cond_wait(&graphs.built, &graphs.lock);
        }
        pthread_mutex_unlock(&graphs.lock);
        return g;
}

/* Runs a replay of a kept graph: its launches in order, as the serve loop
 * runs the ring's (a run of spread launches goes to PoCL together, an
 * inline one alone), each watched by the kernel timeout from its own
 * start. The first that fails ends the replay; its place goes back in
 * failed_part, for cubed to name its kernel. */
void cube__dev_run_graph(cube__qslot *s)
{
        dgraph *g = graph_get(s->graph);
        cl_event events[DEVICE_BATCH];
        uint64_t t = cube__now_ns();

        s->status = 0;
        s->start_ns = t;
        if (*g->why) {
                s->status = -1;
                snprintf(s->reason, sizeof(s->reason), "the device could not keep the graph: "
                         "%.200s", g->why);
        }
        for (uint32_t i = 0; s->status == 0 && i < g->n;) {
                bool in_line = g->launches[i].in_line;
                cl_command_queue queue = cube__dev_queue(in_line);
                uint32_t m = 0;
                cl_int err = CL_SUCCESS;

                /* The inline device runs a launch when it is flushed. */
                atomic_store(&cube__ctl->running_part, i + 1);
                atomic_store(&cube__ctl->running_since, t);
                for (; i + m < g->n && m < (in_line ? 1u : DEVICE_BATCH) &&
                       g->launches[i + m].in_line == in_line; m++) {
                        glaunch *l = &g->launches[i + m];
                        err = clEnqueueNDRangeKernel(queue, l->kernel, 3, NULL, l->global,
                                                     l->local, 0, NULL, &events[m]);
                        if (err != CL_SUCCESS)
                                break;
                }
                clFlush(queue);
                for (uint32_t j = 0; j < m; j++) {
                        if (j > 0) {
                                atomic_store(&cube__ctl->running_part, i + j + 1);
                                atomic_store(&cube__ctl->running_since, t);
                        }
                        if (s->status == 0) {
                                glaunch *l = &g->launches[i + j];
                                cube__dev_finish(s, events[j]);
                                cube__dev_take_record(s, g->words + l->info_at, l->n_info);
                                if (s->status != 0)
                                        s->failed_part = i + j + 1;
                        } else {
                                clWaitForEvents(1, &events[j]);
                                clReleaseEvent(events[j]);
                        }
                        t = cube__now_ns();
                }
                if (err != CL_SUCCESS && s->status == 0) {
                        s->status = err;
                        s->failed_part = i + m + 1;
                        snprintf(s->reason, sizeof(s->reason), "the OpenCL runtime refused the "
                                 "launch (%d)", err);
                }
                i += m;
        }
        atomic_store(&cube__ctl->running_part, 0);
        s->end_ns = cube__now_ns();
}
