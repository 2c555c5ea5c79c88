/*
 * device-serve.c - cube-device --serve: the launch server, the CPU device
 * itself.
 *
 * cubed starts one per CPU device with device memory (fd 3), the launch ring
 * (fd 4, queue.h), a control socket (fd 5) and, when it has one, its loop's
 * eventfd (fd 6). It brings PoCL up over device memory, seals itself
 * (seal.c), and from then on runs launches from the ring, while a control
 * thread loads the program binaries, peers' memory and graphs cubed sends.
 * Kernel code runs here only, so whatever a kernel does ends here too: a
 * fault is recorded in the control block and ends the process, and cubed
 * reports it as the device's poison.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "device.h"
#include "frontend.h"
#include "io.h"
#include "queue.h"
#include "seal.h"

#define SPIN_NS 50000

cube__qctl *cube__ctl;
cube__dev_state cube__dev = { .lock = PTHREAD_MUTEX_INITIALIZER };
static void *qbase;
static uint64_t spin_ns;                /* the serve loop's spin before it sleeps */

/* A kernel faulted (or made a refused call): say what happened where cubed
 * reads it, and end the device. Nothing else is safe here. */
static void on_fault(int sig, siginfo_t *si, void *uc)
{
        atomic_store(&cube__ctl->fault_address, (uint64_t) (uintptr_t) si->si_addr);
        if (sig == SIGSYS)
                atomic_store(&cube__ctl->fault_syscall, (uint32_t) si->si_syscall);
        atomic_store(&cube__ctl->fault_signal, (uint32_t) sig);
        syscall(SYS_exit_group, 128 + sig);
}

static void catch_faults(void)
{
        static const int sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGSYS, SIGABRT, SIGTRAP };
        struct sigaction sa = { .sa_sigaction = on_fault, .sa_flags = SA_SIGINFO };

        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
                sigaction(sigs[i], &sa, NULL);
}

static void reply(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply(int status, const char *fmt, ...)
{
        char text[1024] = "";
        cube__msg_reply r = { .status = status };
        va_list ap;

        va_start(ap, fmt);
        if (fmt)
                vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        r.len = (uint32_t) strlen(text);
        if (cube__write_all(CUBE__FD_CONTROL, &r, sizeof(r)) < 0 ||
            cube__write_all(CUBE__FD_CONTROL, text, r.len) < 0)
                syscall(SYS_exit_group, 0);
}

/* The bare form of loaded module m's entry, or NULL where its program
 * holds none (a generic build) or it cannot be used. */
static module *bare_form(const module *m, const char *entry)
{
        char name[96];
        cl_int err;

        if (m->looped)
                return NULL;
        snprintf(name, sizeof(name), CUBE__BARE_PREFIX "%s", entry);
        cl_kernel k = clCreateKernel(m->program, name, &err);
        module *bare = k ? calloc(1, sizeof(*bare)) : NULL;
        if (!bare || clSetKernelArgSVMPointer(k, 0, cube__dev.arena) != CL_SUCCESS) {
                if (k)
                        clReleaseKernel(k);
                free(bare);
                return NULL;
        }
        bare->program = m->program;
        bare->kernel = k;
        bare->n_buffers = m->n_buffers;
        snprintf(bare->name, sizeof(bare->name), "%s", name);
        return bare;
}

/* Takes NULL. The program is its module's. */
static void free_bare(module *bare)
{
        if (bare) {
                clReleaseKernel(bare->kernel);
                free(bare);
        }
}

static void load(const cube__msg *m, char *payload)
{
        const char *entry = payload;
        size_t elen = strnlen(payload, m->len);
        const unsigned char *bin = (const unsigned char *) payload + elen + 1;
        cl_int err;
        module mod = { .n_buffers = m->n_buffers };

        if (elen >= m->len) {
                reply(-1, "a load without an entry point");
                return;
        }
        /* The binaries, as the build laid them (queue.h). */
        const unsigned char *blob = bin, *bins[2];
        size_t blob_len = m->len - elen - 1, lens[2];
        uint64_t count, size;
        if (blob_len < sizeof(count) || (memcpy(&count, blob, sizeof(count)), count) !=
            cube__dev.devs.n || blob_len < (1 + count) * sizeof(uint64_t)) {
                reply(-1, "the artifact holds binaries for another set of devices");
                return;
        }
        size_t at = (1 + count) * sizeof(uint64_t);
        for (uint64_t i = 0; i < count; i++) {
                memcpy(&size, blob + (1 + i) * sizeof(uint64_t), sizeof(size));
                if (size == 0 || size > blob_len - at) {
                        reply(-1, "the artifact's binary %u is cut short", (unsigned) i);
                        return;
                }
                bins[i] = blob + at;
                lens[i] = size;
                at += size;
                /* From a binary with IR PoCL would compile here, which the seal
                 * forbids (device-binary.c). */
                if (!cube__dev_binary_without_ir(bins[i], lens[i])) {
                        reply(-1, "the artifact's binary %u still holds the program's IR (a "
                              "build of an older cube); it is not loaded", (unsigned) i);
                        return;
                }
        }
        mod.program = clCreateProgramWithBinary(cube__dev.context, cube__dev.devs.n,
                                                cube__dev.devs.ids, lens, bins, NULL, &err);
        if (!mod.program) {
                reply(err, "clCreateProgramWithBinary: %d", err);
                return;
        }
        if ((err = clBuildProgram(mod.program, cube__dev.devs.n, cube__dev.devs.ids, "", NULL,
                                  NULL)) != CL_SUCCESS) {
                clReleaseProgram(mod.program);
                reply(err, "clBuildProgram of the binary: %d", err);
                return;
        }
        snprintf(mod.name, sizeof(mod.name), CUBE__KERNEL_PREFIX "%s", entry);
        mod.kernel = clCreateKernel(mod.program, mod.name, &err);
        if (!mod.kernel) {
                clReleaseProgram(mod.program);
                reply(err, "clCreateKernel(%s): %d", entry, err);
                return;
        }
        cl_ulong shared = 0;
        size_t fixed[3] = { 0, 0, 0 };
        clGetKernelWorkGroupInfo(mod.kernel, cube__dev.devs.ids[0], CL_KERNEL_LOCAL_MEM_SIZE,
                                 sizeof(shared), &shared, NULL);
        /* The front end fixes a looped entry's work-group at one item. */
        clGetKernelWorkGroupInfo(mod.kernel, cube__dev.devs.ids[0],
                                 CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof(fixed), fixed, NULL);
        mod.looped = fixed[0] == 1 && fixed[1] == 1 && fixed[2] == 1;
        if ((err = clSetKernelArgSVMPointer(mod.kernel, 0, cube__dev.arena)) != CL_SUCCESS) {
                clReleaseKernel(mod.kernel);
                clReleaseProgram(mod.program);
                reply(err, "clSetKernelArgSVMPointer(%s): %d", entry, err);
                return;
        }
        mod.bare = bare_form(&mod, entry);
        pthread_mutex_lock(&cube__dev.lock);
        if (m->id >= cube__dev.n_modules) {
                uint32_t n = m->id + 16;
                module *grown = realloc(cube__dev.modules, n * sizeof(*grown));
                if (!grown) {
                        pthread_mutex_unlock(&cube__dev.lock);
                        free_bare(mod.bare);
                        clReleaseKernel(mod.kernel);
                        clReleaseProgram(mod.program);
                        reply(-1, "out of memory");
                        return;
                }
                memset(grown + cube__dev.n_modules, 0, (n - cube__dev.n_modules) * sizeof(*grown));
                cube__dev.modules = grown;
                cube__dev.n_modules = n;
        }
        cube__dev.modules[m->id] = mod;
        pthread_mutex_unlock(&cube__dev.lock);
        reply(0, "%llu", (unsigned long long) shared);
}

/* Reads a control message's header, and the descriptor that came with it
 * (SCM_RIGHTS), or -1. */
static int recv_header(cube__msg *m, int *ret_fd)
{
        union { struct cmsghdr h; char room[CMSG_SPACE(sizeof(int))]; } u;
        struct iovec iov = { m, sizeof(*m) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.room,
                             .msg_controllen = sizeof(u.room) };
        ssize_t n;

        *ret_fd = -1;
        do
                n = recvmsg(CUBE__FD_CONTROL, &mh, MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n <= 0)
                return -1;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
                    cm->cmsg_len == CMSG_LEN(sizeof(int)))
                        memcpy(ret_fd, CMSG_DATA(cm), sizeof(int));
        return (size_t) n == sizeof(*m) ? 0 : cube__read_all(CUBE__FD_CONTROL, (char *) m + n,
                                                             sizeof(*m) - (size_t) n);
}

/* A peer device's memory: mapped, and addressed in windows as device
 * memory is, so a launch may bind it (queue.h's peer addresses). */
static void peer(const cube__msg *m, const char *payload, int fd)
{
        uint64_t size;
        char *map;

        if (fd < 0 || m->len != 8 || m->id >= CUBE__PEERS_MAX) {
                reply(-1, "a peer's memory comes with its descriptor, its size and a free slot");
                return;
        }
        memcpy(&size, payload, 8);
        if (size == 0 || size > CUBE__PEER_SPAN || cube__dev.peers[m->id].map) {
                reply(-1, "a peer's memory of %llu bytes in slot %u does not fit",
                      (unsigned long long) size, m->id);
                return;
        }
        map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (map == MAP_FAILED) {
                reply(-1, "cannot map the peer's memory: %s", strerror(errno));
                return;
        }
        pthread_mutex_lock(&cube__dev.lock);
        cube__dev.peers[m->id].n_windows = (uint32_t) ((size + cube__dev.window - 1) /
                                                       cube__dev.window);
        cube__dev.peers[m->id].map = map;
        pthread_mutex_unlock(&cube__dev.lock);
        reply(0, NULL);
}

/* The control thread: loads, unloads, peers' memory and graphs, until cubed
 * hangs up. */
static void *control_thread(void *arg)
{
        for (;;) {
                cube__msg m;
                char *payload;
                int fd;

                if (recv_header(&m, &fd) < 0 || m.len > (256u << 20))
                        syscall(SYS_exit_group, 0);
                if (fd >= 0 && m.type != CUBE__MSG_PEER) {
                        close(fd);
                        fd = -1;
                }
                if (!(payload = malloc((size_t) m.len + 1)) ||
                    cube__read_all(CUBE__FD_CONTROL, payload, m.len) < 0)
                        syscall(SYS_exit_group, 0);
                payload[m.len] = '\0';
                if (m.type == CUBE__MSG_LOAD) {
                        load(&m, payload);
                } else if (m.type == CUBE__MSG_PEER) {
                        peer(&m, payload, fd);
                        if (fd >= 0)
                                close(fd);
                } else if (m.type == CUBE__MSG_GRAPH || m.type == CUBE__MSG_GRAPH_FREE) {
                        cube__dev_graph_message(&m, payload);
                } else if (m.type == CUBE__MSG_UNLOAD) {
                        pthread_mutex_lock(&cube__dev.lock);
                        if (m.id < cube__dev.n_modules && cube__dev.modules[m.id].kernel) {
                                free_bare(cube__dev.modules[m.id].bare);
                                clReleaseKernel(cube__dev.modules[m.id].kernel);
                                clReleaseProgram(cube__dev.modules[m.id].program);
                                cube__dev.modules[m.id] = (module) { 0 };
                        }
                        pthread_mutex_unlock(&cube__dev.lock);
                }
                free(payload);
        }
        return NULL;
}

/* Whether a launch runs on the inline device: it is the only device, or
 * the launch is one cube, which the spread device could not spread anyway
 * (cube__dev_find_devices), or the device may use one CPU, where PoCL's
 * threads (one per core of the machine) could only take turns, every
 * launch waking each of them. */
bool cube__dev_runs_inline(const cube__qlaunch *l)
{
        return cube__dev.devs.in_line_only ||
               (cube__dev.devs.n == 2 && (cube__dev.cpus == 1 ||
                (uint64_t) l->count[0] * l->count[1] * l->count[2] == 1));
}

cl_command_queue cube__dev_queue(bool in_line)
{
        return cube__dev.queues[in_line && cube__dev.devs.n == 2 ? 1 : 0];
}

/* Whether launch seq runs inline: cube__dev_runs_inline's, or its kernel's
 * way (while timed both ways, a coin from its sequence number, the same
 * each time it is asked). */
static bool runs_inline(const cube__qlaunch *l, uint64_t seq)
{
        module_way way = WAY_SPREAD;

        if (cube__dev_runs_inline(l))
                return true;
        if (cube__dev.devs.n != 2)
                return false;
        pthread_mutex_lock(&cube__dev.lock);
        if (l->module < cube__dev.n_modules)
                way = cube__dev.modules[l->module].timing.way;
        pthread_mutex_unlock(&cube__dev.lock);
        return way == WAY_INLINE ||
               (way == WAY_TIMING_BOTH && (seq * 0x9e3779b97f4a7c15ull) >> 63);
}

/* Launch l ran (in_line or spread) for ns: its kernel's timing (way.c). */
static void timed(const cube__qlaunch *l, bool in_line, uint64_t ns)
{
        unsigned cpus = cube__dev.cpus ? cube__dev.cpus : CPU_SETSIZE;
        module *m;

        if (cube__dev.devs.n != 2 || cube__dev_runs_inline(l))
                return;
        pthread_mutex_lock(&cube__dev.lock);
        m = l->module < cube__dev.n_modules ? &cube__dev.modules[l->module] : NULL;
        if (!m || !m->kernel) {
                pthread_mutex_unlock(&cube__dev.lock);
                return;
        }
        cube__way_timed(&m->timing, in_line, ns, cpus);
        pthread_mutex_unlock(&cube__dev.lock);
}

/* Where device address lies in this process (device memory, or a peer's:
 * queue.h); NULL when it lies in neither. With cube__dev.lock held (the
 * peers). */
static char *place(uint64_t address)
{
        uint64_t at = address % CUBE__PEER_SPAN, p = address / CUBE__PEER_SPAN;
        uint64_t w = at / cube__dev.window;

        if (p == 0 && w < cube__dev.n_windows)
                return cube__dev.memory + at;
        if (p > 0 && p <= CUBE__PEERS_MAX && cube__dev.peers[p - 1].map &&
            w < cube__dev.peers[p - 1].n_windows)
                return cube__dev.peers[p - 1].map + at;
        return NULL;
}

uint32_t cube__dev_place_buffers(const uint64_t *addresses, uint32_t n, uint64_t *ret_pointers)
{
        for (uint32_t i = 0; i < n; i++) {
                char *at = place(addresses[i]);
                if (!at)
                        return i;
                ret_pointers[i] = (uint64_t) (uintptr_t) at;
        }
        return n;
}

/* PoCL copies every argument it is given into memory of its own, allocated
 * and freed at each set. A kernel's launches mostly repeat the arguments of
 * the one before (its buffers; the launch's words change, their info moving
 * along the ring), so a module keeps what its kernel last took, and a value
 * it holds is not set again. */
static cl_int set_kept(cl_kernel k, module *m, cl_uint index, size_t size, const void *value,
                       bool pointer)
{
        bool kept = m && index < MODULE_ARGS_KEPT && size <= MODULE_ARG_BYTES;
        cl_int err;

        if (kept && (m->arg_kept >> index & 1) && memcmp(m->arg[index], value, size) == 0)
                return CL_SUCCESS;
        err = pointer ? clSetKernelArgSVMPointer(k, index, *(void *const *) value) :
                        clSetKernelArg(k, index, size, value);
        if (kept && err == CL_SUCCESS) {
                memcpy(m->arg[index], value, size);
                m->arg_kept |= 1ull << index;
        } else if (kept) {
                m->arg_kept &= ~(1ull << index);
        }
        return err;
}

/* A binding's length for the checks is among the info words' tail
 * (frontend.h), after its buffer words: 0 where they hold none. */
static cl_ulong binding_bytes(const cube__qlaunch *l, const uint64_t *words, uint32_t i)
{
        return l->n_info >= CUBE__CHECK_TAIL_WORDS + l->n_buffers ?
               words[l->n_info - CUBE__CHECK_TAIL_WORDS + i] : 0;
}

cl_int cube__dev_buffer_args(cl_kernel k, module *m, const cube__qlaunch *l,
                             const uint64_t *words)
{
        cl_int err = CL_SUCCESS;

        for (uint32_t i = 0; i < l->n_buffers; i++) {
                void *at = (void *) (uintptr_t) words[i];
                cl_ulong bytes = binding_bytes(l, words, i);
                err |= set_kept(k, m, CUBE__ARG_BUFFERS + 2 * i, sizeof(at), &at, true);
                err |= set_kept(k, m, CUBE__ARG_BUFFERS + 2 * i + 1, sizeof(bytes), &bytes,
                                false);
        }
        return err;
}

/* A looped kernel (the front end's CUBE__LOOPED_KERNEL) runs one work-item
 * per cube, which walks the cube's units itself: PoCL's work-group is one
 * item, and the cube's shape is among the launch's words. Any other runs a
 * work-group per cube. */
cl_int cube__dev_launch_args(cl_kernel k, module *m, bool looped, const cube__qlaunch *l,
                             cl_ulong info_off, cube__launch_arg *cell, size_t ret_global[3],
                             size_t ret_local[3])
{
        cube__launch_arg a = {
                .info_off = info_off, .meta = l->metadata_offset, .dyn = l->dynamic_offset,
                .n_info = l->n_info, .dim = { l->dim[0], l->dim[1], l->dim[2] },
        };

        for (int i = 0; i < 3; i++) {
                ret_local[i] = looped ? 1 : l->dim[i];
                ret_global[i] = (size_t) l->count[i] * ret_local[i];
        }
        if (!looped)
                return set_kept(k, m, CUBE__ARG_LAUNCH, sizeof(a), &a, false);
        *cell = a;
        return set_kept(k, m, CUBE__ARG_LAUNCH, sizeof(cell), &cell, true);
}

/* Where a looped kernel reads its launch's words: a launch run inline has
 * ended before the next is queued, so they all share one cell, and the
 * kernel's argument stays as it is from one to the next; a spread launch
 * has its slot's, as launches queued together run together. */
static cube__launch_arg inline_cell, slot_cells[CUBE__Q_SLOTS];

/* Places a launch's buffers, sets its arguments and queues it on its
 * device's queue (in_line: the inline device's), with an event for its end.
 * Returns false, with the slot's status and reason set, when it cannot run. The module is held (cube__dev.lock) while
 * its kept arguments change: a load may move the modules meanwhile. */
static bool enqueue(cube__qslot *s, uint64_t slot_index, bool in_line, cl_event *ret_event)
{
        cube__launch_arg *cell = in_line ? &inline_cell : &slot_cells[slot_index];
        size_t global[3], local[3];
        cl_kernel k = NULL;
        module *m = NULL;
        uint32_t outside;
        cl_int err;

        pthread_mutex_lock(&cube__dev.lock);
        if (s->launch.module < cube__dev.n_modules)
                m = &cube__dev.modules[s->launch.module];
        s->status = 0;
        if (!m || !m->kernel || m->n_buffers != s->launch.n_buffers ||
            s->launch.n_buffers + s->launch.n_info > CUBE__Q_SLOT_WORDS) {
                pthread_mutex_unlock(&cube__dev.lock);
                s->status = -1;
                snprintf(s->reason, sizeof(s->reason), "the launch names no loaded kernel");
                return false;
        }
        outside = cube__dev_place_buffers(s->data, s->launch.n_buffers, s->data);
        if (outside < s->launch.n_buffers) {
                pthread_mutex_unlock(&cube__dev.lock);
                s->status = -1;
                snprintf(s->reason, sizeof(s->reason), "buffer %u lies outside device memory",
                         outside);
                return false;
        }
        if ((s->launch.flags & CUBE__QL_IN_BOUNDS) && m->bare)
                m = m->bare;
        k = m->kernel;
        cl_ulong info_off = (slot_index * sizeof(cube__qslot) + offsetof(cube__qslot, data)) / 8 +
                            s->launch.n_buffers;
        err = cube__dev_launch_args(k, m, m->looped, &s->launch, info_off, cell, global, local);
        if (!m->looped)
                err |= cube__dev_buffer_args(k, m, &s->launch, s->data);
        pthread_mutex_unlock(&cube__dev.lock);
        /* The arguments are taken when the launch is queued, so the kernel
         * object is free for the next launch at once. */
        if (err == CL_SUCCESS)
                err = clEnqueueNDRangeKernel(cube__dev_queue(in_line), k, 3, NULL, global, local,
                                             0, NULL, ret_event);
        if (err != CL_SUCCESS) {
                s->status = err;
                snprintf(s->reason, sizeof(s->reason), "the OpenCL runtime refused the launch "
                         "(%d)", err);
                return false;
        }
        return true;
}

/* Waits for a queued launch's end; a launch the runtime failed keeps why. */
void cube__dev_finish(cube__qslot *s, cl_event ev)
{
        cl_int status = CL_COMPLETE;

        if (clWaitForEvents(1, &ev) != CL_SUCCESS &&
            clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status,
                           NULL) == CL_SUCCESS && status < 0) {
                s->status = status;
                snprintf(s->reason, sizeof(s->reason), "the OpenCL runtime failed the launch "
                         "(%d)", status);
        }
        clReleaseEvent(ev);
}

/* Takes a checked launch's record of its first access out of bounds (the
 * info words' tail, frontend.h) into the slot: a failed launch, whose
 * reason is the record. The record is cleared for the next run. */
void cube__dev_take_record(cube__qslot *s, uint64_t *info, uint32_t n_info)
{
        if (n_info < CUBE__CHECK_TAIL_WORDS)
                return;
        uint64_t *rec = info + n_info - CUBE__CHECK_TAIL_WORDS;
        if (rec[0] && s->status == 0) {
                s->status = CUBE__Q_OUT_OF_BOUNDS;
                memcpy(s->reason, rec, sizeof(cube__oob_record));
        }
        memset(rec, 0, sizeof(cube__oob_record));
}

/* Whether a thread of cubed sleeps until launch seq (or one before it)
 * has ended. Read after the launch's state and the completions count are
 * stored: a waiter stores what it wants before it reads them, so one of the
 * two always sees the other. */
static bool someone_waits_for(uint64_t seq)
{
        for (unsigned i = 0; i < CUBE__Q_WAITERS; i++) {
                uint64_t w = atomic_load(&cube__ctl->wanted[i]);
                if (w && w <= seq)
                        return true;
        }
        return false;
}

/* Launch seq has ended (its slot says DONE): tells whoever waits for it,
 * a worker of cubed or its loop thread. */
static void ended(uint64_t seq)
{
        static const uint64_t one = 1;
        uint64_t w;

        atomic_fetch_add(&cube__ctl->completions, 1);
        if (someone_waits_for(seq))
                cube__q_futex(&cube__ctl->completions, FUTEX_WAKE, INT_MAX, NULL);
        w = atomic_load(&cube__ctl->loop_wanted);
        if (w && w <= seq && atomic_compare_exchange_strong(&cube__ctl->loop_wanted, &w, 0))
                (void) !write(CUBE__FD_NOTIFY, &one, sizeof(one));
}

/* The device's main loop: the launches in the ring, in order, forever. The
 * launches posted together go to PoCL together and are waited for one by
 * one, each handed back as it ends: one wake-up of PoCL's workers for a
 * batch, not one per launch. A launch that runs inline goes alone: it runs
 * on this thread, and a batch of them would end together. The queue runs
 * one launch at a time, so each runs from the end of the one before it (the
 * first, from when it was queued) to its own end: the device's timestamps
 * of it. A batch never mixes the two devices, so the launch before is always
 * done when the next device starts. */
static void serve_loop(void)
{
        uint64_t next = 1;

        for (;;) {
                cube__qslot *s = cube__q_slot(qbase, next), *batch[DEVICE_BATCH];
                cl_event events[DEVICE_BATCH];
                bool queued[DEVICE_BATCH];
                uint64_t spin_until = 0, t;
                unsigned n = 0;

                /* The clock is read only once the next launch is not there:
                 * behind a busy client it always is. */
                while (atomic_load(&s->state) != CUBE__SLOT_POSTED || s->seq != next) {
                        if (!spin_until)
                                spin_until = cube__now_ns() + spin_ns;
                        if (cube__now_ns() < spin_until) {
                                __builtin_ia32_pause();
                                continue;
                        }
                        uint32_t bell = atomic_load(&cube__ctl->doorbell);
                        atomic_store(&cube__ctl->device_sleeping, 1);
                        if (atomic_load(&s->state) != CUBE__SLOT_POSTED || s->seq != next)
                                cube__q_futex(&cube__ctl->doorbell, FUTEX_WAIT, bell, NULL);
                        atomic_store(&cube__ctl->device_sleeping, 0);
                }
                t = cube__now_ns();
                atomic_store(&cube__ctl->running_since, t);
                atomic_store(&cube__ctl->running_seq, next);
                if (s->graph) {
                        cube__dev_run_graph(s);
                        atomic_store(&cube__ctl->running_seq, 0);
                        atomic_store(&s->state, CUBE__SLOT_DONE);
                        ended(next);
                        next++;
                        continue;
                }
                bool in_line = runs_inline(&s->launch, next);
                cl_command_queue queue = cube__dev_queue(in_line);
                for (uint64_t seq = next; n < (in_line ? 1u : DEVICE_BATCH); seq++, n++) {
                        cube__qslot *q = cube__q_slot(qbase, seq);
                        if (atomic_load(&q->state) != CUBE__SLOT_POSTED || q->seq != seq ||
                            q->graph || runs_inline(&q->launch, seq) != in_line)
                                break;
                        batch[n] = q;
                        queued[n] = enqueue(q, seq % CUBE__Q_SLOTS, in_line, &events[n]);
                }
                clFlush(queue);
                for (unsigned i = 0; i < n; i++) {
                        atomic_store(&cube__ctl->running_since, t);
                        atomic_store(&cube__ctl->running_seq, next + i);
                        if (queued[i]) {
                                cube__dev_finish(batch[i], events[i]);
                                cube__dev_take_record(batch[i], batch[i]->data +
                                                      batch[i]->launch.n_buffers,
                                                      batch[i]->launch.n_info);
                        }
                        batch[i]->start_ns = t;
                        batch[i]->end_ns = t = cube__now_ns();
                        timed(&batch[i]->launch, in_line, t - batch[i]->start_ns);
                        atomic_store(&cube__ctl->running_seq, 0);
                        atomic_store(&batch[i]->state, CUBE__SLOT_DONE);
                        ended(next + i);
                }
                next += n;
        }
}

/* Everything the device does to itself before a client's code can run:
 * every descriptor but its four closed, no capability, no new privilege,
 * the file system fenced to kcache, the system calls to seal.c's list. */
int cube__dev_seal_self(const char *kcache)
{
        int r;

        if (close_range(CUBE__FD_NOTIFY + 1, ~0u, 0) < 0)
                return -errno;
        if ((r = cube__seal_privileges()) < 0)
                return r;
        if ((r = cube__seal_landlock(kcache, true)) < 0 && r != -ENOSYS)
                return r;
        catch_faults();
        return cube__seal_seccomp();
}

/* The window (queue.h): the largest power of two every one of devs takes in
 * one buffer, at most CUBE__WINDOW_MAX. */
static uint64_t window_bytes(const cpu_devices *devs)
{
        uint64_t w = CUBE__WINDOW_MAX;

        for (cl_uint i = 0; i < devs->n; i++) {
                cl_ulong most = 0;
                if (clGetDeviceInfo(devs->ids[i], CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(most), &most,
                                    NULL) == CL_SUCCESS && most > 0)
                        while (w > most && w > 4096)
                                w >>= 1;
        }
        return w;
}

static int serve_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int serve_fail(const char *fmt, ...)
{
        char text[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        reply(-1, "%s", text);
        return 1;
}

int cube__dev_serve_main(int argc, char **argv)
{
        const char *kcache;
        uint64_t memory_bytes;
        cl_int err;
        void *memory;
        pthread_t control;
        char version[256] = "", name[256] = "";
        int r;

        if (argc != 4)
                return 1;
        kcache = argv[2];
        memory_bytes = strtoull(argv[3], NULL, 10);
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
                return 1;
        cube__dev_limit(RLIMIT_CORE, 0);
        qbase = mmap(NULL, CUBE__Q_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, CUBE__FD_QUEUE, 0);
        memory = mmap(NULL, memory_bytes ? memory_bytes : 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
                      CUBE__FD_MEMORY, 0);
        if (qbase == MAP_FAILED || memory == MAP_FAILED)
                return serve_fail("cannot map device memory: %s", strerror(errno));
        cube__ctl = qbase;
        setenv("POCL_CACHE_DIR", kcache, 1);
        if (cube__dev_find_devices(&cube__dev.devs) < 0 || cube__dev.devs.n == 0)
                return serve_fail("no OpenCL CPU device (is pocl-opencl-icd installed?)");
        for (cl_uint i = 0; i < cube__dev.devs.n; i++) {
                cl_device_svm_capabilities svm = 0;
                clGetDeviceInfo(cube__dev.devs.ids[i], CL_DEVICE_SVM_CAPABILITIES, sizeof(svm),
                                &svm, NULL);
                if (!(svm & CL_DEVICE_SVM_FINE_GRAIN_BUFFER))
                        return serve_fail("the OpenCL CPU device takes no fine-grained SVM "
                                          "pointers, as PoCL's CPU devices do");
        }
        cube__dev.context = clCreateContext(NULL, cube__dev.devs.n, cube__dev.devs.ids, NULL, NULL,
                                            &err);
        if (!cube__dev.context)
                return serve_fail("clCreateContext: %d", err);
        for (cl_uint i = 0; i < cube__dev.devs.n; i++) {
                cube__dev.queues[i] = clCreateCommandQueueWithProperties(cube__dev.context,
                                                                         cube__dev.devs.ids[i],
                                                                         NULL, &err);
                if (!cube__dev.queues[i])
                        return serve_fail("clCreateCommandQueue: %d", err);
        }
        cube__dev.window = window_bytes(&cube__dev.devs);
        cube__ctl->window = cube__dev.window;
        cube__dev.n_windows = (uint32_t) ((memory_bytes + cube__dev.window - 1) / cube__dev.window);
        cube__dev.memory = memory;
        /* Read and written: a checked launch records its first access out of
         * bounds among its info words. */
        cube__dev.arena = (char *) qbase + CUBE__Q_CTL_BYTES;
        clGetPlatformInfo(cube__dev.devs.platform, CL_PLATFORM_VERSION, sizeof(version) - 1,
                          version, NULL);
        clGetDeviceInfo(cube__dev.devs.ids[0], CL_DEVICE_NAME, sizeof(name) - 1, name, NULL);
        if (cube__dev.devs.n == 2)
                strncat(name, ", one-cube launches inline", sizeof(name) - strlen(name) - 1);

        /* Whatever PoCL starts lazily, start it now: a warm-up launch of a
         * built-in-free empty program would compile, so none runs here. */
        if (pthread_create(&control, NULL, control_thread, NULL) != 0)
                return serve_fail("cannot start the control thread");

        spin_ns = cube__q_spin_ns(SPIN_NS);
        cube__dev.cpus = cube__q_cpus();

        /* The seal: from here on a client's code may run. */
        if ((r = cube__dev_seal_self(kcache)) < 0)
                return serve_fail("cannot seal the device process: %s", strerror(-r));
        cube__ctl->ready = 1;
        reply(0, "%s %s", version, name);
        serve_loop();
        return 0;
}

