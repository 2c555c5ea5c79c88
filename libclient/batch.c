/*
 * batch.c - launches that go out together.
 *
 * A launch needs no answer, so the library need not pay a system call for
 * each: it appends the launch's frame to the connection's batch and returns.
 * The batch goes out, in order and ahead of it, with the next frame anything
 * else sends (a sync, a read, a write); at once when it reaches BATCH_BYTES;
 * and otherwise BATCH_DELAY_NS after its first launch was queued, sent by a
 * flusher thread the connection starts with its first batched launch. So a
 * burst of launches costs one send per batch, a launch followed by a sync
 * goes out with the sync, and a lone launch still reaches the device within
 * BATCH_DELAY_NS, never waiting on the caller's next call. A process that
 * exits without disconnecting still sends what waits: the library's
 * destructor flushes every batch.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "rpc.h"

/* Sent at once when this much waits: large enough that a burst costs one
 * send per hundred-odd launches, small enough to stay in cache. */
#define BATCH_BYTES (16 * 1024)
/* The longest a launch waits in the batch. */
#define BATCH_DELAY_NS (50 * 1000)

static uint64_t now_ns(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (uint64_t) t.tv_sec * 1000000000u + (uint64_t) t.tv_nsec;
}

/* Every connection with a flusher, for the destructor. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static cube_client *live;

static void live_add(cube_client *c)
{
        pthread_mutex_lock(&live_lock);
        c->batch.next_live = live;
        live = c;
        pthread_mutex_unlock(&live_lock);
}

static void live_remove(cube_client *c)
{
        pthread_mutex_lock(&live_lock);
        for (cube_client **p = &live; *p; p = &(*p)->batch.next_live)
                if (*p == c) {
                        *p = c->batch.next_live;
                        break;
                }
        pthread_mutex_unlock(&live_lock);
}

/* exit() without cube_disconnect: launches still waiting are sent, as they
 * would have been had each gone out on its own. Only by the process that
 * made them: a forked child's copy of a batch is not its to send. A
 * connection whose lock is held is sending already (and a thread holding it
 * may wait for live_lock: trying avoids that deadlock). */
__attribute__((destructor)) static void flush_at_exit(void)
{
        pid_t self = getpid();

        pthread_mutex_lock(&live_lock);
        for (cube_client *c = live; c; c = c->batch.next_live) {
                if (c->batch.owner != self || pthread_mutex_trylock(&c->write_lock) != 0)
                        continue;
                if (c->batch.len > 0)
                        cube_error_free(cube__send_locked(c, NULL, 0));
                pthread_mutex_unlock(&c->write_lock);
        }
        pthread_mutex_unlock(&live_lock);
}

/* Sends whatever waits once it has waited BATCH_DELAY_NS. It runs at the
 * lowest priority: it has work only once its caller has gone quiet, and
 * woken at the caller's on the caller's CPU it would preempt it, which costs
 * a launch + sync on a busy CPU two context switches (on these 2-vCPU VMs,
 * a median of 42-49 us against 30-33 us; docs/PERFORMANCE.md). A caller
 * that keeps its CPU busy delays a lone launch by its time slice either way:
 * the flusher must get that CPU to send. */
static void *flusher(void *arg)
{
        cube_client *c = arg;
        cube__batch *b = &c->batch;

        (void) setpriority(PRIO_PROCESS, (id_t) gettid(), 19);
        pthread_mutex_lock(&c->write_lock);
        while (!b->stop) {
                if (b->len == 0) {
                        pthread_cond_wait(&b->cond, &c->write_lock);
                        continue;
                }
                uint64_t due = b->since + BATCH_DELAY_NS;
                if (now_ns() < due) {
                        struct timespec at = { (time_t) (due / 1000000000u),
                                               (long) (due % 1000000000u) };
                        pthread_cond_timedwait(&b->cond, &c->write_lock, &at);
                        continue;
                }
                /* A failure marks the connection dead; the next call says why. */
                cube_error_free(cube__send_locked(c, NULL, 0));
        }
        pthread_mutex_unlock(&c->write_lock);
        return NULL;
}

/* Starts the flusher with every signal blocked: signals are the
 * application's, and must not land on a thread it never made. */
static int start_flusher(cube_client *c)
{
        cube__batch *b = &c->batch;
        pthread_condattr_t attr;
        sigset_t all, old;
        int r;

        if (pthread_condattr_init(&attr) != 0)
                return -ENOMEM;
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        r = pthread_cond_init(&b->cond, &attr);
        pthread_condattr_destroy(&attr);
        if (r != 0)
                return -r;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = pthread_create(&b->thread, NULL, flusher, c);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r != 0) {
                pthread_cond_destroy(&b->cond);
                return -r;
        }
        b->started = true;
        b->owner = getpid();
        live_add(c);
        return 0;
}

cube_error *cube__send_batched(cube_client *c, const void *frame, size_t len)
{
        cube__batch *b = &c->batch;
        struct iovec iov = { (void *) frame, len };
        cube_error *e = NULL;

        pthread_mutex_lock(&c->write_lock);
        /* A launch on a lost connection says so, as a send would have. */
        pthread_mutex_lock(&c->lock);
        if (c->dead)
                e = cube_error_clone(c->dead);
        pthread_mutex_unlock(&c->lock);
        if (e) {
                pthread_mutex_unlock(&c->write_lock);
                return e;
        }
        if (b->len + len > b->cap) {
                size_t cap = b->len + len > BATCH_BYTES ? b->len + len : BATCH_BYTES;
                char *grown = realloc(b->buf, cap);
                if (!grown) {
                        /* No room to wait in: it goes out now, after the batch. */
                        e = cube__send_locked(c, &iov, 1);
                        pthread_mutex_unlock(&c->write_lock);
                        return e;
                }
                b->buf = grown;
                b->cap = cap;
        }
        bool first = b->len == 0;
        memcpy(b->buf + b->len, frame, len);
        b->len += len;
        if (b->len >= BATCH_BYTES || (!b->started && start_flusher(c) < 0)) {
                e = cube__send_locked(c, NULL, 0);
        } else if (first) {
                b->since = now_ns();
                pthread_cond_signal(&b->cond);
        }
        pthread_mutex_unlock(&c->write_lock);
        return e;
}

void cube__batch_finish(cube_client *c)
{
        cube__batch *b = &c->batch;

        if (b->started && b->owner != getpid()) {
                /* A forked child's copy: the flusher and the batch are the
                 * parent's. */
                live_remove(c);
                free(b->buf);
                *b = (cube__batch) {0};
                return;
        }
        pthread_mutex_lock(&c->write_lock);
        if (b->len > 0 && c->fd >= 0)
                cube_error_free(cube__send_locked(c, NULL, 0));
        b->stop = true;
        if (b->started)
                pthread_cond_signal(&b->cond);
        pthread_mutex_unlock(&c->write_lock);
        if (b->started) {
                pthread_join(b->thread, NULL);
                pthread_cond_destroy(&b->cond);
                live_remove(c);
        }
        free(b->buf);
        *b = (cube__batch) {0};
}
