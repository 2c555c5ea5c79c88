/*
 * dispatch.h - what the method handlers share: the message being handled,
 * and the ways of answering it.
 */
#ifndef CUBED_DISPATCH_H
#define CUBED_DISPATCH_H

#include "cubed.h"

/* One message being handled. */
typedef struct cube__msg {
        cube__conn *conn;
        cube__session *session;
        cube__server *server;
        const cube__envelope *env;
        const msgpack_object *p;        /* params */
        uint32_t n;                     /* number of params */
        void *buf;                      /* the read buffer, for a write to keep */
} cube__msg;

/* dispatch.c */
/* Answers a message whose params have the wrong shape, and closes. */
bool cube__malformed(cube__msg *k, const char *what);
void cube__reply_ok_nil(cube__msg *k);
/* Answers with e (or an out-of-memory error when e is NULL), and frees it. */
void cube__reply_owned_error(cube__msg *k, cube_error *e);
/* Reads [stream, [handle, ...]]: the shape of read, sync and check. */
bool cube__get_stream_handles(cube__msg *k, uint64_t *ret_stream, cube_handle **ret_handles,
                              size_t *ret_n);

/* memory-methods.c */
/* Records e as the failure of bytes [start, end) of a: the work that was to
 * write them did not. Takes e. */
void cube__fail_range(cube__session *s, cube__name *n, uint64_t start, uint64_t end,
                      cube_error *e);
cube__dispatched cube__do_create(cube__msg *k);
cube__dispatched cube__do_write(cube__msg *k);
cube__dispatched cube__do_free(cube__msg *k);
cube__dispatched cube__do_read(cube__msg *k);
cube__dispatched cube__do_sync(cube__msg *k);
cube__dispatched cube__do_check(cube__msg *k);
cube__dispatched cube__do_flush(cube__msg *k);
cube__dispatched cube__do_memory_cleanup(cube__msg *k);
cube__dispatched cube__do_memory_report(cube__msg *k);
cube__dispatched cube__do_stream_ids(cube__msg *k);
cube__dispatched cube__do_allocation_mode(cube__msg *k);

/* admin.c */
cube__dispatched cube__do_status(cube__msg *k);
cube__dispatched cube__do_kernels(cube__msg *k);
cube__dispatched cube__do_kernel_cache(cube__msg *k);
cube__dispatched cube__do_config(cube__msg *k);
cube__dispatched cube__do_bans(cube__msg *k);
cube__dispatched cube__do_ended_sessions(cube__msg *k);
cube__dispatched cube__do_recent_failures(cube__msg *k);
cube__dispatched cube__do_failures(cube__msg *k);
cube__dispatched cube__do_sessions(cube__msg *k);
cube__dispatched cube__do_streams(cube__msg *k);
cube__dispatched cube__do_memory(cube__msg *k);
cube__dispatched cube__do_metrics(cube__msg *k);
cube__dispatched cube__do_drain(cube__msg *k);
cube__dispatched cube__do_undrain(cube__msg *k);
cube__dispatched cube__do_kill_session(cube__msg *k);

/* regions.c */
cube__dispatched cube__do_region(cube__msg *k);
cube__dispatched cube__do_region_free(cube__msg *k);

/* share.c */
cube__dispatched cube__do_export(cube__msg *k);
cube__dispatched cube__do_import(cube__msg *k);

/* inject.c */
cube__dispatched cube__do_inject(cube__msg *k);

/* profile.c */
cube__dispatched cube__do_start_profile(cube__msg *k);
cube__dispatched cube__do_end_profile(cube__msg *k);
cube__dispatched cube__do_abandon_profile(cube__msg *k);

/* graphs.c */
cube__dispatched cube__do_graph_prepare(cube__msg *k);
cube__dispatched cube__do_begin_capture(cube__msg *k);
cube__dispatched cube__do_end_capture(cube__msg *k);
cube__dispatched cube__do_replay(cube__msg *k);
cube__dispatched cube__do_graph_destroy(cube__msg *k);
cube__dispatched cube__do_captures(cube__msg *k);
/* groups.c */
cube__dispatched cube__do_comm_init(cube__msg *k);
cube__dispatched cube__do_comm_mint(cube__msg *k);
cube__dispatched cube__do_comms(cube__msg *k);

/* collectives.c */
cube__dispatched cube__do_collective(cube__msg *k);
cube__dispatched cube__do_sync_collective(cube__msg *k);

/* peer.c */
cube__dispatched cube__do_can_access_peer(cube__msg *k);
cube__dispatched cube__do_peer_memory(cube__msg *k);
cube__dispatched cube__do_peer_address(cube__msg *k);
cube__dispatched cube__do_peer_bind(cube__msg *k);
cube__dispatched cube__do_peer_wrote(cube__msg *k);

/* launches.c */
cube__dispatched cube__do_register(cube__msg *k);
cube__dispatched cube__do_launch(cube__msg *k);
cube__dispatched cube__do_compile_queued(cube__msg *k);

#endif
