/*
 * submit.c - the CPU device's streams and the work submitted on them.
 *
 * A stream's work runs in order. Worker threads take a ready stream's work a
 * batch at a time: copies with memcpy into and out of device memory, on
 * cubed's side; launches into the shared ring (queue.h), for the device
 * process, waited for together.
 *
 * A stream with nothing queued for a worker posts its launches (and the
 * fences among them) to the ring straight from cubed's loop thread, and the
 * device wakes that loop when they have ended (driver.h's loop_fd): a
 * launch + sync then costs two wake-ups, not four. Copies, which take time
 * on cubed's side, and work queued behind them go through the workers.
 */
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "frontend.h"
#include "errors.h"
#include "io.h"

static cube_error *dead_error(cube__device *d)
{
        cube_error *e;

        pthread_mutex_lock(&d->dead_lock);
        e = cube__err_poison("%s", d->dead_reason);
        pthread_mutex_unlock(&d->dead_lock);
        return e;
}

/* Where buffer i of launch l lies for the device: device memory, or a
 * peer's (queue.h). */
uint64_t cube__cpu_device_address(const cube__launch_work *l, uint32_t i)
{
        const cube__storage *st = l->storages[i];

        return (st->peer ? CUBE__PEER_SPAN * st->peer : 0) + st->offset + l->offsets[i];
}

/* Whether the device shares cubed's one CPU: then neither side spins
 * (cube__q_spin_ns). */
static bool shares_one_cpu(const cube__device *d)
{
        return d->spin_ns == 0;
}

/* Puts w, a launch or a graph's replay, in the ring, and wakes the device
 * if it sleeps. Where the device shares cubed's one CPU,
 * the wake-up is owed instead, and the poster pays it once it has posted
 * what it has (ring_owed): woken at once, the device would take that CPU
 * for the one launch posted so far, and a burst of launches cost a context
 * switch for every two or three of them. Returns its sequence number; or 0
 * with w->error set when refused; or 0 with w->error untouched when the
 * ring's next slot is still held (await_slot).
 *
 * A slot is held from its post until its poster takes the launch back, and
 * the loop thread takes back what it posted only when it next runs; the
 * workers may lap the ring meanwhile. So a post never waits for its slot:
 * waiting under post_lock, it would stop the loop, which posts under
 * d->lock and takes back under d->lock, and cubed would hang for good. */
static uint64_t post(cube__device *d, cube__work *w)
{
        const cube__launch_work *l = w->op == CUBE__WORK_LAUNCH ? w->launch : NULL;
        const cube__dgraph *g = w->graph;
        uint64_t seq;
        cube__qslot *s;

        if (atomic_load(&d->dead)) {
                w->error = dead_error(d);
                return 0;
        }
        if (l && (uint64_t) l->n_buffers + l->n_info > CUBE__Q_SLOT_WORDS) {
                w->error = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_UNKNOWN, "a launch of '%s' carries %u buffers and %u info "
                        "words; the CPU device takes %u in all", l->kernel, l->n_buffers,
                        l->n_info, CUBE__Q_SLOT_WORDS));
                return 0;
        }
        pthread_mutex_lock(&d->post_lock);
        s = cube__q_slot(d->queue, d->next_seq + 1);
        if (atomic_load(&s->state) != CUBE__SLOT_FREE) {
                pthread_mutex_unlock(&d->post_lock);
                return 0;
        }
        seq = ++d->next_seq;
        s->seq = seq;
        s->status = 0;
        s->failed_part = 0;
        s->reason[0] = '\0';
        if (!l) {
                s->graph = g->id;
                s->launch = (cube__qlaunch) { 0 };
                d->slot_kernel[seq % CUBE__Q_SLOTS] = g->label;
                d->slot_facts[seq % CUBE__Q_SLOTS] = NULL;
                d->slot_graph[seq % CUBE__Q_SLOTS] = g;
                goto posted;
        }
        s->graph = 0;
        s->launch.module = l->module->id;
        memcpy(s->launch.count, l->count, sizeof(s->launch.count));
        memcpy(s->launch.dim, l->dim, sizeof(s->launch.dim));
        s->launch.n_buffers = l->n_buffers;
        s->launch.n_info = l->n_info;
        s->launch.metadata_offset = l->metadata_offset;
        s->launch.dynamic_offset = l->dynamic_offset;
        s->launch.flags = l->in_bounds ? CUBE__QL_IN_BOUNDS : 0;
        for (uint32_t i = 0; i < l->n_buffers; i++)
                s->data[i] = cube__cpu_device_address(l, i);
        if (l->n_info)
                memcpy(s->data + l->n_buffers, l->info, (size_t) l->n_info * 8);
        d->slot_kernel[seq % CUBE__Q_SLOTS] = l->kernel;
        d->slot_facts[seq % CUBE__Q_SLOTS] = l->module->facts;
        d->slot_graph[seq % CUBE__Q_SLOTS] = NULL;
posted:
        atomic_store(&s->state, CUBE__SLOT_POSTED);
        atomic_fetch_add(&d->ctl->doorbell, 1);
        bool wake = atomic_load(&d->ctl->device_sleeping);
        if (wake && shares_one_cpu(d)) {
                d->bell_owed = true;
                wake = false;
        }
        pthread_mutex_unlock(&d->post_lock);
        if (wake)
                cube__q_futex(&d->ctl->doorbell, FUTEX_WAKE, 1, NULL);
        return seq;
}

/* Rings the doorbell that posts left owed (post). */
static void ring_owed(cube__device *d)
{
        pthread_mutex_lock(&d->post_lock);
        bool owed = d->bell_owed;
        d->bell_owed = false;
        pthread_mutex_unlock(&d->post_lock);
        if (owed)
                cube__q_futex(&d->ctl->doorbell, FUTEX_WAKE, 1, NULL);
}

/* Waits, holding nothing, until the ring's next slot is free or the device
 * is dead: a worker whose post found the slot held (post), once it has
 * taken back its own launches, which may be what holds it. */
static void await_slot(cube__device *d)
{
        pthread_mutex_lock(&d->post_lock);
        cube__qslot *s = cube__q_slot(d->queue, d->next_seq + 1);
        pthread_mutex_unlock(&d->post_lock);

        for (unsigned i = 0; atomic_load(&s->state) != CUBE__SLOT_FREE && !atomic_load(&d->dead);
             i++) {
                if (i < 64) {
                        sched_yield();
                } else {
                        struct timespec t = { 0, 50 * 1000 };
                        nanosleep(&t, NULL);
                }
        }
}

/* Waits, as waiter me (a worker's index), until launch seq has ended or
 * the device is dead. The device runs launches in order, so every launch
 * before seq has ended too. */
static void await_launch(cube__device *d, unsigned me, uint64_t seq)
{
        cube__qslot *s = cube__q_slot(d->queue, seq);
        uint64_t spin_until = cube__now_ns() + d->spin_ns;

        while (atomic_load(&s->state) != CUBE__SLOT_DONE && cube__now_ns() < spin_until &&
               !atomic_load(&d->dead))
                __builtin_ia32_pause();
        if (atomic_load(&s->state) == CUBE__SLOT_DONE)
                return;
        atomic_store(&d->ctl->wanted[me], seq);
        for (;;) {
                uint32_t v = atomic_load(&d->ctl->completions);
                if (atomic_load(&s->state) == CUBE__SLOT_DONE || atomic_load(&d->dead))
                        break;
                /* A bound on the sleep: the device is not trusted to wake us. */
                struct timespec t = { 0, 100 * 1000 * 1000 };
                cube__q_futex(&d->ctl->completions, FUTEX_WAIT, v, &t);
        }
        atomic_store(&d->ctl->wanted[me], 0);
}

/* A checked launch that went out of bounds: the launch's failure, a
 * Validation (the kernel and the device are fine; this launch's inputs or
 * indexing were not), described from the record the device took. */
static cube_error *out_of_bounds(cube__device *d, uint64_t seq, cube__work *w,
                                 const cube__qslot *s)
{
        cube__oob_record r;
        const cube__fe_facts *facts = d->slot_facts[seq % CUBE__Q_SLOTS];
        const char *kernel = d->slot_kernel[seq % CUBE__Q_SLOTS];
        char text[768], graph[160] = "";
        uint32_t part = s->failed_part;

        memcpy(&r, s->reason, sizeof(r));
        if (w->op == CUBE__WORK_GRAPH && part >= 1 && part <= w->graph->n) {
                facts = w->graph->facts[part - 1];
                kernel = w->graph->kernels[part - 1];
                snprintf(graph, sizeof(graph), " (launch %u of %s)", part, w->graph->label);
        }
        cube__fe_describe_oob(facts, kernel ? kernel : "?", &r, text, sizeof(text));
        return cube__err_validation("%s%s", text, graph);
}

/* Takes the result of launch seq, which has ended (await_launch), into w:
 * its error, and when the device ran it (driver.h's device timing). */
static void harvest(cube__device *d, uint64_t seq, cube__work *w)
{
        cube__qslot *s = cube__q_slot(d->queue, seq);
        cube_error *e = NULL;

        if (atomic_load(&s->state) == CUBE__SLOT_DONE && s->seq == seq) {
                w->start_ns = s->start_ns;
                w->end_ns = s->end_ns;
                if (s->status == CUBE__Q_OUT_OF_BOUNDS) {
                        e = out_of_bounds(d, seq, w, s);
                } else if (s->status != 0) {
                        char reason[CUBE__Q_REASON];
                        memcpy(reason, s->reason, sizeof(reason));
                        reason[sizeof(reason) - 1] = '\0';
                        uint32_t part = s->failed_part;
                        if (w->op == CUBE__WORK_GRAPH && part >= 1 && part <= w->graph->n)
                                e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                                        CUBE_LAUNCH_UNKNOWN, "%s stopped at its launch %u, of "
                                        "kernel '%s', on the CPU device: %s", w->graph->label,
                                        part, w->graph->kernels[part - 1], reason));
                        else if (w->op == CUBE__WORK_GRAPH)
                                e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                                        CUBE_LAUNCH_UNKNOWN, "%s did not run on the CPU device: "
                                        "%s", w->graph->label, reason));
                        else
                                e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                                        CUBE_LAUNCH_UNKNOWN, "kernel '%s' did not run on the CPU "
                                        "device: %s", d->slot_kernel[seq % CUBE__Q_SLOTS], reason));
                }
        } else {
                e = dead_error(d);
        }
        atomic_store(&s->state, CUBE__SLOT_FREE);
        w->error = e;
}

/* Starts what is posted (ring_owed), waits for the *n launches this
 * worker posted (seqs, in order), takes their results, and empties the list. */
static void take_back(cube__device *d, unsigned me, cube__work **pending, const uint64_t *seqs,
                      unsigned *n)
{
        ring_owed(d);
        if (*n == 0)
                return;
        await_launch(d, me, seqs[*n - 1]);
        for (unsigned i = 0; i < *n; i++)
                harvest(d, seqs[i], pending[i]);
        *n = 0;
}

static void copy(cube__device *d, cube__work *w)
{
        char *dev = cube__cpu_bytes_of(d, w->storage) + w->offset;

        for (uint64_t r = 0; r < (w->rows > 1 ? w->rows : 1); r++) {
                if (w->op == CUBE__WORK_COPY_TO_DEVICE)
                        memcpy(dev + r * w->pitch, (const char *) w->host + r * w->len, w->len);
                else
                        memcpy((char *) w->host + r * w->len, dev + r * w->pitch, w->len);
        }
}

/* Runs a batch of one stream's work in order. Launches in a row go into the
 * ring together and are waited for together; a copy or a fence waits for the
 * launches before it, so the stream's order holds. */
static void perform(cube__device *d, unsigned me, cube__work *batch)
{
        cube__work *pending[CPU_WORKER_BATCH];
        uint64_t seqs[CPU_WORKER_BATCH];
        unsigned n = 0;

        for (cube__work *w = batch; w; w = w->next) {
                if (w->op == CUBE__WORK_LAUNCH || w->op == CUBE__WORK_GRAPH) {
                        uint64_t seq;
                        while (!(seq = post(d, w)) && !w->error) {
                                take_back(d, me, pending, seqs, &n);
                                await_slot(d);
                        }
                        if (seq) {
                                pending[n] = w;
                                seqs[n++] = seq;
                        }
                        continue;
                }
                take_back(d, me, pending, seqs, &n);
                if (w->op != CUBE__WORK_FENCE)
                        copy(d, w);
        }
        take_back(d, me, pending, seqs, &n);
}

static void make_ready(cube__device *d, cube__dstream *s)
{
        if (s->ready || s->busy || s->direct_n || !s->head)
                return;
        s->ready = true;
        s->next_ready = NULL;
        if (d->ready_tail)
                d->ready_tail->next_ready = s;
        else
                d->ready_head = s;
        d->ready_tail = s;
        pthread_cond_signal(&d->wake);
}

/* A worker: takes a ready stream and up to CPU_WORKER_BATCH pieces of work
 * queued on it, performs them in order, hands them back with one completion,
 * and puts the stream at the back of the ready list if more is queued. */
void *cube__cpu_worker(void *arg)
{
        cube__device *d = arg;
        unsigned me = atomic_fetch_add(&d->worker_ids, 1);     /* < CPU_MAX_WORKERS */

        pthread_mutex_lock(&d->lock);
        for (;;) {
                while (!d->ready_head && !d->stopping)
                        pthread_cond_wait(&d->wake, &d->lock);
                if (!d->ready_head)
                        break;
                cube__dstream *s = d->ready_head;
                d->ready_head = s->next_ready;
                if (!d->ready_head)
                        d->ready_tail = NULL;
                s->ready = false;
                s->busy = true;
                cube__work *batch = s->head, *last = batch;
                for (int n = 1; n < CPU_WORKER_BATCH && last->next; n++)
                        last = last->next;
                s->head = last->next;
                if (!s->head)
                        s->tail = NULL;
                last->next = NULL;
                pthread_mutex_unlock(&d->lock);

                perform(d, me, batch);
                d->config.complete(d->config.complete_ctx, batch);

                pthread_mutex_lock(&d->lock);
                s->busy = false;
                if (s->closed)
                        free(s);
                else
                        make_ready(d, s);
        }
        pthread_mutex_unlock(&d->lock);
        return NULL;
}

cube_error *cube__cpu_stream_open(cube__device *d, cube__dstream **ret_stream)
{
        cube__dstream *s = calloc(1, sizeof(*s));

        if (!s)
                return cube__err_generic("out of host memory creating a stream");
        *ret_stream = s;
        return NULL;
}

void cube__cpu_stream_close(cube__device *d, cube__dstream *s)
{
        bool busy;

        pthread_mutex_lock(&d->lock);
        busy = s->busy;
        s->closed = true;
        pthread_mutex_unlock(&d->lock);
        if (!busy)
                free(s);
}

/* The seq of the last launch among the first n posted from the loop
 * thread and not yet taken back, or 0 when they are all fences and
 * failures (under lock). */
static uint64_t last_posted(const cube__device *d, unsigned n)
{
        for (unsigned k = n; k > 0; k--) {
                uint64_t seq = d->direct[(d->direct_first + k - 1) % CPU_DIRECT_MAX].seq;
                if (seq)
                        return seq;
        }
        return 0;
}

/* Asks the device to write loop_fd when the last launch posted from the
 * loop thread has ended, or writes it now when nothing it waits for is on
 * the ring (under lock). With the loop's share of the ring half full or
 * more, and the device on a CPU of its own, it asks at the half-way launch
 * instead: woken only at the last, the loop posted the next launches only
 * once the device had run dry, and a burst's launches waited a wake-up of
 * the loop's CPU for every CPU_DIRECT_MAX of them. */
static void arm_loop(cube__device *d)
{
        uint64_t last = 0;

        if (!shares_one_cpu(d) && d->direct_n >= CPU_DIRECT_MAX / 2)
                last = last_posted(d, d->direct_n / 2);
        if (!last)
                last = last_posted(d, d->direct_n);
        /* Stored before the slot is read, as the device stores DONE before
         * it reads this: one of the two sees the other. */
        if (last) {
                atomic_store(&d->ctl->loop_wanted, last);
                if (atomic_load(&cube__q_slot(d->queue, last)->state) == CUBE__SLOT_DONE)
                        cube__cpu_notify_loop(d);
        } else if (d->direct_n) {
                cube__cpu_notify_loop(d);         /* only fences and failures: they end now */
        }
}

/* What the loop thread may post: work that takes cubed no time. */
static bool postable(const cube__work *w)
{
        return w->op == CUBE__WORK_LAUNCH || w->op == CUBE__WORK_GRAPH ||
               w->op == CUBE__WORK_FENCE;
}

/* Whether all of w's chain is postable. */
static bool all_postable(const cube__work *w)
{
        for (; w; w = w->next)
                if (!postable(w))
                        return false;
        return true;
}

/* Posts the launches and fences at the head of stream s to the ring, from
 * the loop thread, while the loop may hold more and the ring's next slot is
 * free (under lock). The loop never waits for a slot (post): what it leaves
 * is posted once the stream's launches on the ring are taken back, or by a
 * worker once none is left (make_ready). */
static void post_direct(cube__device *d, cube__dstream *s)
{
        while (s->head && d->direct_n < CPU_DIRECT_MAX && postable(s->head)) {
                cube__work *w = s->head;
                uint64_t seq = 0;

                if (w->op != CUBE__WORK_FENCE) {
                        seq = post(d, w);
                        if (!seq && !w->error)
                                break;
                }
                s->head = w->next;
                if (!s->head)
                        s->tail = NULL;
                w->next = NULL;
                unsigned i = (d->direct_first + d->direct_n++) % CPU_DIRECT_MAX;
                d->direct[i].w = w;
                d->direct[i].seq = seq;
                d->direct[i].s = s;
                s->direct_n++;
        }
}

/* Takes back what was posted from the loop thread and has ended, in order
 * (all of it once the device is dead), and hands it back (under lock). Each
 * slot taken back lets a stream's next launch or fence be posted, while the
 * device still runs the rest; work that needs a worker goes to one once
 * none of its stream's work is left on the ring, and the worker takes it
 * only after this hands back what came before it. */
void cube__cpu_harvest_direct(cube__device *d)
{
        cube__work *done = NULL, **tail = &done;
        bool dead = atomic_load(&d->dead);

        while (d->direct_n) {
                unsigned i = d->direct_first;
                uint64_t seq = d->direct[i].seq;
                cube__dstream *s = d->direct[i].s;
                cube__work *w = d->direct[i].w;

                if (seq && !dead &&
                    atomic_load(&cube__q_slot(d->queue, seq)->state) != CUBE__SLOT_DONE)
                        break;
                if (seq)
                        harvest(d, seq, w);
                d->direct_first = (i + 1) % CPU_DIRECT_MAX;
                d->direct_n--;
                *tail = w;
                tail = &w->next;
                s->direct_n--;
                if (s->head) {
                        post_direct(d, s);
                        make_ready(d, s);
                }
        }
        if (done)
                d->config.complete(d->config.complete_ctx, done);
}

void cube__cpu_loop_ready(cube__device *d)
{
        pthread_mutex_lock(&d->lock);
        cube__cpu_harvest_direct(d);
        arm_loop(d);
        pthread_mutex_unlock(&d->lock);
}

/* What the loop posted this round starts (post). */
void cube__cpu_loop_idle(cube__device *d)
{
        ring_owed(d);
}

void cube__cpu_submit(cube__device *d, cube__dstream *s, cube__work *w)
{
        cube__work *last = w;

        while (last->next)
                last = last->next;
        pthread_mutex_lock(&d->lock);
        if (s->tail)
                s->tail->next = w;
        else
                s->head = w;
        s->tail = last;
        /* A stream a worker holds, or will, keeps its order there; so does
         * a chain with a copy in it, which a worker then takes whole rather
         * than after a trip through the loop. */
        if (d->config.loop_fd >= 0 && !s->busy && !s->ready &&
            (s->direct_n || (s->head == w && all_postable(w)))) {
                post_direct(d, s);
                arm_loop(d);
        }
        make_ready(d, s);
        pthread_mutex_unlock(&d->lock);
}
