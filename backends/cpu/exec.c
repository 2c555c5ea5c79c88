/*
 * exec.c - running kernels on the CPU with a GPU's semantics.
 *
 * Cubes run in parallel, one per thread at a time, on a pool sized to the
 * machine. Within a cube, units must behave as a GPU's do: sync_cube() is a
 * real barrier and SHARED memory is shared by the cube's units. Units of a
 * kernel that never calls sync_cube() simply run one after another in a loop
 * the compiler can inline. Units of one that does each get a stack of their
 * own (ucontext), and the thread switches between them: every unit runs until
 * its next barrier, and only when all have arrived does any go further.
 *
 * A kernel that faults (a bad pointer, a division by zero, a stack overflow)
 * must not take the daemon down. Every pool thread catches SIGSEGV, SIGBUS,
 * SIGFPE and SIGILL on an alternate stack while it runs kernel code and jumps
 * back out of the kernel; the launch then reports the fault as a DevicePoison
 * naming the kernel. A fault anywhere else is a daemon bug and crashes as it
 * would have without us.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "cpu.h"
#include "errors.h"

#define UNIT_STACK (64 * 1024)
#define ALT_STACK (64 * 1024)

enum { UNIT_RUNNING, UNIT_AT_BARRIER, UNIT_DONE };

typedef struct cpu_job {
        const cube__launch_work *l;
        void **bufs;
        uint32_t count[3];
        uint64_t total;
        atomic_uint_fast64_t next;
        atomic_int faulted;
        char fault[256];
} cpu_job;

/* One thread's means of running cubes. */
typedef struct cpu_thread {
        uint32_t max_units;
        uint8_t *stacks;                /* max_units stacks, mapped on first use */
        ucontext_t sched;
        ucontext_t *uctx;
        cube__cpu_unit *units;
        uint8_t *state;
        uint32_t current;
        const cpu_job *job;
        void *altstack;
} cpu_thread;

struct cube__cpu_pool {
        unsigned n_threads;
        pthread_t *threads;
        uint32_t max_units;
        pthread_mutex_t lock;
        pthread_cond_t wake;
        pthread_cond_t done;
        cpu_job *job;
        uint64_t generation;
        unsigned tickets;               /* pool threads the job still wants */
        unsigned active;
        bool stopping;
};

static __thread cpu_thread *self;
static __thread cpu_thread *caller;     /* a submitting thread's own state */
static __thread sigjmp_buf *fault_jump;
static __thread int fault_signal;
static __thread void *fault_address;

static struct sigaction previous[NSIG];
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;

static void on_fault(int sig, siginfo_t *si, void *uc)
{
        if (fault_jump) {
                fault_signal = sig;
                fault_address = si->si_addr;
                siglongjmp(*fault_jump, 1);
        }
        /* Not a kernel's fault: behave as if we had never been installed. */
        if (previous[sig].sa_flags & SA_SIGINFO && previous[sig].sa_sigaction) {
                previous[sig].sa_sigaction(sig, si, uc);
                return;
        }
        if (previous[sig].sa_handler != SIG_DFL && previous[sig].sa_handler != SIG_IGN) {
                previous[sig].sa_handler(sig);
                return;
        }
        signal(sig, SIG_DFL);
}

static void install_handlers(void)
{
        static const int sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL };
        struct sigaction sa = { .sa_sigaction = on_fault, .sa_flags = SA_SIGINFO | SA_ONSTACK };

        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
                sigaction(sigs[i], &sa, &previous[sigs[i]]);
}

static cpu_thread *thread_new(uint32_t max_units)
{
        cpu_thread *t = calloc(1, sizeof(*t));
        stack_t ss;

        if (!t)
                return NULL;
        t->max_units = max_units;
        t->altstack = malloc(ALT_STACK);
        if (!t->altstack) {
                free(t);
                return NULL;
        }
        ss = (stack_t) { .ss_sp = t->altstack, .ss_size = ALT_STACK };
        sigaltstack(&ss, NULL);
        pthread_once(&handlers_once, install_handlers);
        return t;
}

/* Turns the alternate signal stack off; called on the thread that set it,
 * before that thread ends (a thread must not leave it pointing at freed
 * memory, and sanitizers unmap whatever is left set). */
static void thread_leave(cpu_thread *t)
{
        stack_t ss = { .ss_flags = SS_DISABLE };

        if (t)
                sigaltstack(&ss, NULL);
}

static void thread_free(cpu_thread *t)
{
        if (!t)
                return;
        if (t->stacks)
                munmap(t->stacks, (size_t) t->max_units * UNIT_STACK);
        free(t->uctx);
        free(t->units);
        free(t->state);
        free(t->altstack);
        free(t);
}

/* Maps the unit stacks, each with a guard page below it, on first need. */
static int thread_prepare_units(cpu_thread *t)
{
        size_t total = (size_t) t->max_units * UNIT_STACK;

        if (t->stacks)
                return 0;
        /* A failed try keeps what it got, for the next one to reuse. */
        if (!t->uctx)
                t->uctx = calloc(t->max_units, sizeof(*t->uctx));
        if (!t->units)
                t->units = calloc(t->max_units, sizeof(*t->units));
        if (!t->state)
                t->state = calloc(t->max_units, 1);
        if (!t->uctx || !t->units || !t->state)
                return -ENOMEM;
        t->stacks = mmap(NULL, total, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (t->stacks == MAP_FAILED) {
                t->stacks = NULL;
                return -ENOMEM;
        }
        for (uint32_t i = 0; i < t->max_units; i++)
                mprotect(t->stacks + (size_t) i * UNIT_STACK, 4096, PROT_NONE);
        return 0;
}

static void fill_unit(cube__cpu_unit *u, const cpu_job *job, const uint32_t cube_pos[3])
{
        const cube__launch_work *l = job->l;

        memcpy(u->cube_pos, cube_pos, sizeof(u->cube_pos));
        memcpy(u->cube_dim, l->dim, sizeof(u->cube_dim));
        memcpy(u->cube_count, job->count, sizeof(u->cube_count));
        u->metadata_offset = l->metadata_offset;
        u->dynamic_offset = l->dynamic_offset;
}

/* sync_cube(): park this unit until every unit of the cube has arrived. */
static void unit_sync(void *ctx)
{
        cpu_thread *t = ctx;
        uint32_t i = t->current;

        t->state[i] = UNIT_AT_BARRIER;
        swapcontext(&t->uctx[i], &t->sched);
}

static void unit_main(void)
{
        cpu_thread *t = self;
        uint32_t i = t->current;

        t->job->l->module->unit_entry(&t->units[i], (void *const *) t->job->bufs, t->job->l->info);
        t->state[i] = UNIT_DONE;
}

/* Gives unit i a fresh context on its own stack, starting at unit_main.
 * Kept apart from the scheduling loop: getcontext returns twice, and no local
 * of that loop may live across it. */
__attribute__((noinline))
static void prepare_unit(cpu_thread *t, const cpu_job *job, const uint32_t cube_pos[3], uint32_t i)
{
        const uint32_t *dim = job->l->dim;
        cube__cpu_unit *u = &t->units[i];

        fill_unit(u, job, cube_pos);
        u->unit_pos[0] = i % dim[0];
        u->unit_pos[1] = (i / dim[0]) % dim[1];
        u->unit_pos[2] = i / (dim[0] * dim[1]);
        u->sync = unit_sync;
        u->sync_ctx = t;
        t->state[i] = UNIT_RUNNING;
        getcontext(&t->uctx[i]);
        t->uctx[i].uc_stack.ss_sp = t->stacks + (size_t) i * UNIT_STACK + 4096;
        t->uctx[i].uc_stack.ss_size = UNIT_STACK - 4096;
        t->uctx[i].uc_link = &t->sched;
        makecontext(&t->uctx[i], unit_main, 0);
}

/* Runs one cube of a kernel that has barriers: round after round, every
 * unit that is not done runs until its next barrier or its end. */
__attribute__((noinline))
static void run_cube_with_barriers(cpu_thread *t, const cpu_job *job, const uint32_t cube_pos[3])
{
        const uint32_t *dim = job->l->dim;
        uint32_t n = dim[0] * dim[1] * dim[2], remaining = n;

        for (uint32_t i = 0; i < n; i++)
                prepare_unit(t, job, cube_pos, i);
        while (remaining > 0) {
                for (uint32_t i = 0; i < n; i++) {
                        if (t->state[i] == UNIT_DONE)
                                continue;
                        t->state[i] = UNIT_RUNNING;
                        t->current = i;
                        swapcontext(&t->sched, &t->uctx[i]);
                        if (t->state[i] == UNIT_DONE)
                                remaining--;
                }
        }
}

static void unreachable_sync(void *ctx)
{
        abort();        /* a kernel without sync_cube() never calls it */
}

/* Takes cubes from the job until none is left or a kernel faulted. */
static void participate(cpu_thread *t, cpu_job *job)
{
        sigjmp_buf jb;

        self = t;
        t->job = job;
        /* Saving the signal mask would cost two system calls per launch; the
         * only change a fault makes to it is blocking its own signal, which
         * is undone here. */
        if (sigsetjmp(jb, 0)) {
                int expected = 0;
                sigset_t faulted;
                fault_jump = NULL;
                sigemptyset(&faulted);
                sigaddset(&faulted, fault_signal);
                pthread_sigmask(SIG_UNBLOCK, &faulted, NULL);
                if (atomic_compare_exchange_strong(&job->faulted, &expected, 1))
                        snprintf(job->fault, sizeof(job->fault), "%s at address %p in kernel "
                                 "'%s'", strsignal(fault_signal), fault_address, job->l->kernel);
                return;
        }
        fault_jump = &jb;
        while (!atomic_load(&job->faulted)) {
                uint64_t c = atomic_fetch_add(&job->next, 1);
                uint32_t pos[3];
                if (c >= job->total)
                        break;
                pos[0] = (uint32_t) (c % job->count[0]);
                pos[1] = (uint32_t) (c / job->count[0] % job->count[1]);
                pos[2] = (uint32_t) (c / ((uint64_t) job->count[0] * job->count[1]));
                if (job->l->module->uses_sync) {
                        run_cube_with_barriers(t, job, pos);
                } else {
                        cube__cpu_unit u = { .sync = unreachable_sync };
                        fill_unit(&u, job, pos);
                        job->l->module->cube_entry(&u, (void *const *) job->bufs, job->l->info);
                }
        }
        fault_jump = NULL;
}

static void *pool_thread(void *arg)
{
        cube__cpu_pool *p = arg;
        cpu_thread *t = thread_new(p->max_units);
        uint64_t seen = 0;
        sigset_t block;

        /* Signals meant for the daemon go to its loop, not here. */
        sigemptyset(&block);
        sigaddset(&block, SIGTERM);
        sigaddset(&block, SIGINT);
        sigaddset(&block, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &block, NULL);

        pthread_mutex_lock(&p->lock);
        for (;;) {
                while (!p->stopping && p->generation == seen)
                        pthread_cond_wait(&p->wake, &p->lock);
                if (p->stopping)
                        break;
                seen = p->generation;
                if (p->tickets == 0)
                        continue;       /* a small job: the others run it */
                p->tickets--;
                cpu_job *job = p->job;
                pthread_mutex_unlock(&p->lock);
                if (t && (!job->l->module->uses_sync || thread_prepare_units(t) == 0))
                        participate(t, job);
                pthread_mutex_lock(&p->lock);
                if (--p->active == 0)
                        pthread_cond_signal(&p->done);
        }
        pthread_mutex_unlock(&p->lock);
        thread_leave(t);
        thread_free(t);
        return NULL;
}

cube__cpu_pool *cube__cpu_pool_new(unsigned threads, uint32_t max_units)
{
        cube__cpu_pool *p = calloc(1, sizeof(*p));

        if (!p)
                return NULL;
        p->max_units = max_units;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->wake, NULL);
        pthread_cond_init(&p->done, NULL);
        p->threads = calloc(threads ? threads : 1, sizeof(*p->threads));
        if (!p->threads) {
                cube__cpu_pool_free(p);
                return NULL;
        }
        for (unsigned i = 0; i < threads; i++) {
                if (pthread_create(&p->threads[i], NULL, pool_thread, p) != 0)
                        break;
                p->n_threads++;
        }
        return p;
}

void cube__cpu_pool_leave(cube__cpu_pool *p)
{
        if (!caller)
                return;
        thread_leave(caller);
        thread_free(caller);
        caller = NULL;
}

void cube__cpu_pool_free(cube__cpu_pool *p)
{
        if (!p)
                return;
        pthread_mutex_lock(&p->lock);
        p->stopping = true;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        for (unsigned i = 0; i < p->n_threads; i++)
                pthread_join(p->threads[i], NULL);
        free(p->threads);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->wake);
        pthread_cond_destroy(&p->done);
        free(p);
}

cube_error *cube__cpu_run(cube__cpu_pool *p, const cube__launch_work *l)
{
        cpu_job job = { .l = l };
        cube_error *e = NULL;

        memcpy(job.count, l->count, sizeof(job.count));
        job.total = (uint64_t) job.count[0] * job.count[1] * job.count[2];
        if (job.total == 0)
                return NULL;
        void *few[16];
        job.bufs = l->n_buffers <= 16 ? few : calloc(l->n_buffers, sizeof(void *));
        if (!job.bufs)
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_OUT_OF_MEMORY,
                                      "out of host memory launching kernel '%s'", l->kernel));
        for (uint32_t i = 0; i < l->n_buffers; i++)
                job.bufs[i] = l->storages[i] ? (char *) l->storages[i]->bytes + l->offsets[i] : NULL;

        if (!caller && !(caller = thread_new(p->max_units))) {
                if (job.bufs != few)
                        free(job.bufs);
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_OUT_OF_MEMORY,
                                      "out of host memory launching kernel '%s'", l->kernel));
        }
        if (l->module->uses_sync && thread_prepare_units(caller) < 0) {
                if (job.bufs != few)
                        free(job.bufs);
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_OUT_OF_MEMORY,
                                      "cannot map unit stacks for kernel '%s'", l->kernel));
        }

        /* Only as many pool threads as there are cubes beyond the caller's
         * first are woken: a launch of one cube costs no wake-up at all. */
        unsigned helpers = job.total - 1 < p->n_threads ? (unsigned) (job.total - 1) : p->n_threads;
        if (helpers) {
                pthread_mutex_lock(&p->lock);
                p->job = &job;
                p->active = helpers;
                p->tickets = helpers;
                p->generation++;
                for (unsigned i = 0; i < helpers; i++)
                        pthread_cond_signal(&p->wake);
                pthread_mutex_unlock(&p->lock);
        }

        participate(caller, &job);

        if (helpers) {
                pthread_mutex_lock(&p->lock);
                while (p->active > 0)
                        pthread_cond_wait(&p->done, &p->lock);
                p->job = NULL;
                p->tickets = 0;
                pthread_mutex_unlock(&p->lock);
        }

        if (atomic_load(&job.faulted))
                e = cube__err_poison("%s", job.fault);
        if (job.bufs != few)
                free(job.bufs);
        return e;
}
