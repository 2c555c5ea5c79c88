/*
 * queue.h - the shared ring between cubed and a CPU device process.
 *
 * The CPU device is a process of its own (device-main.c). cubed and the
 * device both map two memfds: device memory, and this control block with its
 * launch slots. Launches (and replays of the graphs the device keeps) go one
 * way through the slots and completions come back in the same slots; a futex
 * word in each direction is the doorbell, rung only when the other side says
 * it sleeps, so a burst of launches costs no system call per launch. Only
 * what is rare travels on the control socket (CUBE__MSG_*): program binaries
 * to load and unload, a peer's memory (its descriptor passed along), and the
 * launches of a graph for the device to keep, and to drop.
 *
 * The device is not trusted: a kernel can scribble over this block (its info
 * words live in it). cubed reads from it only sequence numbers and bounded
 * strings, and a device that lies about them can only fail its own launches.
 */
#ifndef CUBE_CPU_QUEUE_H
#define CUBE_CPU_QUEUE_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CUBE__Q_MAGIC 0x63756265u       /* "cube" */
#define CUBE__Q_SLOTS 256u
#define CUBE__Q_SLOT_WORDS 8192u        /* offsets + info words one launch may carry */
#define CUBE__Q_REASON 256u
/* A slot's status for a checked launch that went out of bounds: its reason
 * holds the record (frontend.h's cube__oob_record), not text. */
#define CUBE__Q_OUT_OF_BOUNDS 1
#define CUBE__Q_WAITERS 8u              /* cubed threads that wait on the ring */

/* A slot's state: who owns it now. */
enum {
        CUBE__SLOT_FREE = 0,            /* cubed may fill it */
        CUBE__SLOT_POSTED = 1,          /* the device may run it */
        CUBE__SLOT_DONE = 2,            /* the device ran it; cubed reads the result */
};

/* A launch as the device takes it: in a slot of the ring, or as one launch
 * of a graph the device keeps (CUBE__MSG_GRAPH). n_buffers byte offsets into
 * device memory and n_info info words come with it. */
typedef struct cube__qlaunch {
        uint32_t module;
        uint32_t count[3];
        uint32_t dim[3];
        uint32_t n_buffers;
        uint32_t n_info;
        uint32_t metadata_offset;
        uint32_t dynamic_offset;
        uint32_t flags;                 /* CUBE__QL_* */
} cube__qlaunch;

/* cubed proved the launch in bounds (driver.h's in_bounds): the device may
 * run its module's bare kernel. */
#define CUBE__QL_IN_BOUNDS 1u

/* One launch, or a replay of a kept graph. data holds the launch's buffer
 * offsets, then its info words; the kernel reads its info words straight
 * from here. */
typedef struct cube__qslot {
        _Atomic uint32_t state;
        uint32_t graph;                 /* not 0: a replay of this graph (CUBE__MSG_GRAPH) */
        uint64_t seq;
        cube__qlaunch launch;           /* when graph is 0 */
        int32_t status;                 /* 0, CUBE__Q_OUT_OF_BOUNDS, or the OpenCL error the
                                         * launch got */
        uint32_t failed_part;           /* a replay that failed: at which launch, from 1 */
        uint64_t start_ns, end_ns;      /* CLOCK_MONOTONIC, where the device ran it */
        char reason[CUBE__Q_REASON];    /* why status is not 0 */
        uint64_t data[CUBE__Q_SLOT_WORDS];
} cube__qslot;

/* The control block, at offset 0 of the control memfd; the slots follow. */
typedef struct cube__qctl {
        uint32_t magic;
        uint32_t ready;                 /* the device is up and sealed */
        _Atomic uint32_t doorbell;      /* futex: cubed bumps it after posting */
        _Atomic uint32_t device_sleeping;
        _Atomic uint32_t completions;   /* futex: the device bumps it after each launch */
        _Atomic uint32_t pad0;
        /* Per cubed thread that may sleep on completions: the launch it
         * waits for, 0 when it does not. The device wakes the sleepers only
         * when it ends a launch one of them waits for, so a batch of
         * launches costs cubed one wake-up, not one per launch. */
        _Atomic uint64_t wanted[CUBE__Q_WAITERS];
        _Atomic uint64_t running_seq;   /* the launch the device runs now, 0 when idle */
        _Atomic uint64_t running_since; /* CLOCK_MONOTONIC ns */
        _Atomic uint32_t running_part;  /* in a graph: the launch it runs now, from 1 */
        _Atomic uint32_t pad1;
        _Atomic uint32_t fault_signal;  /* set by the device's fault handler */
        _Atomic uint32_t fault_syscall;
        _Atomic uint64_t fault_address;
        char init_error[CUBE__Q_REASON];
        /* The launch cubed's loop thread waits for, 0 when it waits for
         * none: when it (or one after it) ends, the device takes it back to
         * 0 and writes CUBE__FD_NOTIFY, once. */
        _Atomic uint64_t loop_wanted;
        uint64_t window;                /* set by the device before it answers: its window */
        uint64_t pad[6];
} cube__qctl;

#define CUBE__Q_CTL_BYTES 4096u
#define CUBE__Q_BYTES (CUBE__Q_CTL_BYTES + (uint64_t) CUBE__Q_SLOTS * sizeof(cube__qslot))

static inline cube__qslot *cube__q_slot(void *base, uint64_t seq)
{
        return (cube__qslot *) ((char *) base + CUBE__Q_CTL_BYTES) + (seq % CUBE__Q_SLOTS);
}

/* The control socket's messages: a header, then len bytes. */
enum {
        CUBE__MSG_LOAD = 1,             /* id, entry '\0' binary -> status, and the
                                         * shared bytes in decimal (or why not) */
        CUBE__MSG_UNLOAD = 2,           /* id -> nothing */
        CUBE__MSG_PEER = 3,             /* id (a slot), size (u64), with a peer's memory
                                         * descriptor (SCM_RIGHTS) -> status, reason */
        CUBE__MSG_GRAPH = 4,            /* id, n_buffers = launches, then that many
                                         * records (cube__qlaunch, then its data
                                         * words) -> nothing: a replay that finds the
                                         * graph unbuilt fails with why */
        CUBE__MSG_GRAPH_FREE = 5,       /* id -> nothing */
};

/* A graph the device keeps holds at most this many launches (larger ones
 * replay through the ring), and the device keeps at most CUBE__QG_TOTAL
 * launches in all its graphs: each is a kernel object of the device's. A
 * graph's records travel in one message of at most CUBE__QG_BYTES. */
#define CUBE__QG_LAUNCHES 4096u
#define CUBE__QG_TOTAL 65536u
#define CUBE__QG_BYTES (4u << 20)       /* of one CUBE__MSG_GRAPH */

typedef struct cube__msg {
        uint32_t type;
        uint32_t id;
        uint32_t n_buffers;
        uint32_t len;
} cube__msg;

typedef struct cube__msg_reply {
        int32_t status;
        uint32_t len;                   /* of the reason that follows */
} cube__msg_reply;

/* Kernels address device memory in windows, no allocation straddling two.
 * A window is the largest power of two that PoCL takes as one buffer
 * (CL_DEVICE_MAX_MEM_ALLOC_SIZE), at most this: PoCL's own limit follows
 * the host's memory as its topology reports it (a quarter of a NUMA node's),
 * so on some hosts it is 1 GiB or less, and a fixed window would give a
 * kernel a buffer larger than the device says one can be. The device process
 * picks it and says it in the control block. */
#define CUBE__WINDOW_MAX (2ull << 30)

/* A peer device's memory, mapped by both cubed and the device process: at
 * most CUBE__PEERS_MAX of them. A launch names a byte of peer slot s's
 * memory as CUBE__PEER_SPAN * (s + 1) + its offset there, so device memory
 * (of at most CUBE__PEER_SPAN bytes) and each peer's never overlap. */
#define CUBE__PEERS_MAX 16u
#define CUBE__PEER_SPAN (1ull << 44)

/* The futex call both sides make on the ring's futex words. */
static inline long cube__q_futex(_Atomic uint32_t *word, int op, uint32_t val,
                                 const struct timespec *timeout)
{
        return syscall(SYS_futex, word, op, val, timeout, NULL, 0);
}

/* The CPUs this process may run on, or 0 where that cannot be read. */
static inline unsigned cube__q_cpus(void)
{
        cpu_set_t set;

        return sched_getaffinity(0, sizeof(set), &set) == 0 ? (unsigned) CPU_COUNT(&set) : 0;
}

/* Whether this process may run on one CPU only. */
static inline bool cube__q_one_cpu(void)
{
        return cube__q_cpus() == 1;
}

/* How long a side of the ring spins before it sleeps, given how long it
 * would like to: spinning pays only while the awaited side runs meanwhile.
 * Confined to one CPU, a spin holds the very CPU the other side needs, and
 * each wait costs the whole spin. */
static inline uint64_t cube__q_spin_ns(uint64_t wanted)
{
        return cube__q_one_cpu() ? 0 : wanted;
}

/* The descriptors the device process is started with. */
#define CUBE__FD_MEMORY 3
#define CUBE__FD_QUEUE 4
#define CUBE__FD_CONTROL 5
#define CUBE__FD_NOTIFY 6               /* an eventfd of cubed's loop (driver.h's loop_fd) */

/* The artifact a build writes: this header, then binary_bytes of program
 * binaries: a uint64_t count N (1 or 2), N uint64_t sizes, then the N
 * binaries, one for each of the device's PoCL devices (spread, then
 * inline; device-main.c). One program holds every entry point of its
 * source, each the kernel CUBE__KERNEL_PREFIX + its name (the prelude's
 * CUBE__ENTRY_NAME); a load names the one it wants, and the device answers
 * the shared memory it declares. */
#define CUBE__ARTIFACT_MAGIC "cube-ocl-3"
#define CUBE__KERNEL_PREFIX "cube__k_"
#define CUBE__BARE_PREFIX "cube__kb_"       /* its bare form (device.h's module) */
typedef struct cube__artifact_head {
        char magic[16];
        uint64_t binary_bytes;
} cube__artifact_head;

#endif
