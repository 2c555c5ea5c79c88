/*
 * bench-baselines.h - what the machine itself does over a Unix socket, for
 * cube-bench to print beside cube's own figures.
 *
 * Every baseline forks a peer process that plays the daemon's part. The peer
 * runs on the CPUs given (the daemon's own placement), or anywhere when the
 * set is NULL, so that both sides of a baseline sit where cubed and its
 * client sit.
 */
#ifndef BENCH_BASELINES_H
#define BENCH_BASELINES_H

#include <sched.h>
#include <stddef.h>

/* Seconds on CLOCK_MONOTONIC. */
double bench_now(void);

/* 64 B ping-pong: each of the iters round trips, in seconds, into out. */
void raw_ping_pong(const cpu_set_t *peer_cpus, int iters, double *out);

/* The same, the peer passing each message to a worker process of its own
 * (on the same CPUs) and back before it answers: the turns a launch + sync
 * takes through cubed and its device process. */
void raw_relay(const cpu_set_t *peer_cpus, int iters, double *out);

/* n 64 B messages written one by one, each answered by a 16 B ack: messages
 * per second from the first write to the last ack. */
double raw_pipelined(const cpu_set_t *peer_cpus, int n);

/* size bytes written to the peer, to its one-byte ack: seconds. */
double raw_bulk_send(const cpu_set_t *peer_cpus, size_t size);

/* A one-byte request, to the last of size bytes the peer answers: seconds. */
double raw_bulk_receive(const cpu_set_t *peer_cpus, size_t size);

/* clients threads, each on a socket of its own, ping-pong 64 B with one
 * single-threaded epoll server for seconds: round trips per second, all
 * clients together. */
double raw_many_clients(const cpu_set_t *peer_cpus, int clients, double seconds);

/* Gloo's own allreduce of bytes of f32 between two processes on cpus (NULL:
 * unpinned), run by the bench-gloo program beside this one: runs of iters
 * operations. Returns 0 with the median over runs of seconds per operation,
 * the median seconds of one operation and the fastest one; -1 when
 * bench-gloo was not built or failed. */
int gloo_allreduce(const cpu_set_t *cpus, size_t bytes, int iters, int runs,
                   double *ret_per_op, double *ret_single, double *ret_fastest);

#endif
