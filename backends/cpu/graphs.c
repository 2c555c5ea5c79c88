/*
 * graphs.c - graphs the CPU device process keeps.
 *
 * A captured graph is handed to the device process once (queue.h's
 * CUBE__MSG_GRAPH), as launch records it builds into kernel objects of its
 * own; a replay is then one slot of the ring, not one per launch, and the
 * device names the launch that failed. Graphs beyond what the device keeps
 * replay through the core's software graph (driver.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "errors.h"

/* Hands the device process a captured graph to keep: a replay is then one
 * slot of the ring instead of one per launch. Graphs beyond what the device
 * keeps (queue.h) replay through their launches. */
cube_error *cube__cpu_graph_create(cube__device *d, cube__launch_work *const *launches,
                                   size_t n, const char *label, cube__dgraph **ret_graph)
{
        cube__msg msg = { .type = CUBE__MSG_GRAPH };
        size_t bytes = 0, at = 0;
        cube__dgraph *g;
        char *payload;

        if (n > CUBE__QG_LAUNCHES || d->graph_launches + n > CUBE__QG_TOTAL)
                return cube__err_generic("the CPU device keeps graphs of at most %u launches, "
                                         "%u in all (%u kept now)", CUBE__QG_LAUNCHES,
                                         CUBE__QG_TOTAL, d->graph_launches);
        for (size_t i = 0; i < n; i++) {
                if ((uint64_t) launches[i]->n_buffers + launches[i]->n_info > CUBE__Q_SLOT_WORDS)
                        return cube__err_generic("launch %zu carries too many words", i);
                bytes += sizeof(cube__qlaunch) +
                         ((size_t) launches[i]->n_buffers + launches[i]->n_info) * 8;
        }
        if (bytes > CUBE__QG_BYTES)
                return cube__err_generic("the CPU device keeps graphs of at most %u bytes of "
                                         "launch records; this one has %zu", CUBE__QG_BYTES,
                                         bytes);
        g = calloc(1, sizeof(*g));
        payload = malloc(bytes ? bytes : 1);
        if (g) {
                g->kernels = calloc(n, sizeof(*g->kernels));
                g->facts = calloc(n, sizeof(*g->facts));
        }
        if (!g || !payload || !g->kernels || !g->facts) {
                if (g) {
                        free(g->kernels);
                        free(g->facts);
                }
                free(g);
                free(payload);
                return cube__err_generic("out of host memory");
        }
        for (size_t i = 0; i < n; i++) {
                const cube__launch_work *l = launches[i];
                cube__qlaunch rec = {
                        .module = l->module->id, .n_buffers = l->n_buffers, .n_info = l->n_info,
                        .metadata_offset = l->metadata_offset,
                        .dynamic_offset = l->dynamic_offset,
                };
                memcpy(rec.count, l->count, sizeof(rec.count));
                memcpy(rec.dim, l->dim, sizeof(rec.dim));
                memcpy(payload + at, &rec, sizeof(rec));
                at += sizeof(rec);
                for (uint32_t b = 0; b < l->n_buffers; b++, at += 8) {
                        uint64_t address = cube__cpu_device_address(l, b);
                        memcpy(payload + at, &address, 8);
                }
                memcpy(payload + at, l->info, (size_t) l->n_info * 8);
                at += (size_t) l->n_info * 8;
                snprintf(g->kernels[i], sizeof(g->kernels[i]), "%s", l->kernel);
                g->facts[i] = l->module->facts;
        }
        g->n = (uint32_t) n;
        snprintf(g->label, sizeof(g->label), "%s", label);
        msg.id = g->id = ++d->next_graph;
        msg.n_buffers = g->n;
        msg.len = (uint32_t) bytes;
        /* A device that is gone fails the replays, as it fails launches. */
        (void) cube__cpu_send_notice(d, &msg, payload);
        free(payload);
        d->graph_launches += g->n;
        *ret_graph = g;
        return NULL;
}

void cube__cpu_graph_destroy(cube__device *d, cube__dgraph *g)
{
        if (!g)
                return;
        (void) cube__cpu_send_notice(d, &(cube__msg) { .type = CUBE__MSG_GRAPH_FREE, .id = g->id },
                                     NULL);
        pthread_mutex_lock(&d->post_lock);
        for (unsigned i = 0; i < CUBE__Q_SLOTS; i++)
                if (d->slot_graph[i] == g)
                        d->slot_graph[i] = NULL;
        pthread_mutex_unlock(&d->post_lock);
        d->graph_launches -= g->n;
        free(g->kernels);
        free(g->facts);
        free(g);
}
