/*
 * gloo.cc - the Gloo engine behind transport.h: collectives between CPU
 * devices over TCP, on one host or across hosts.
 *
 * Members meet through a rendezvous store that rank 0 serves on a TCP socket
 * it was handed (transport.h: cube__comm_setup): a key-value store with
 * blocking gets, enough for gloo::rendezvous::Context::connectFullMesh and
 * for the members to learn each other's names. The store lives for one join
 * only; a barrier after the mesh is up says everyone is done with it.
 *
 * Every collective begins with the status exchange (transport.h): each
 * member sends every other a head saying what it runs (the operation, its
 * dtype, reduction and root) and its status, all at once, so a refusal, or
 * members whose sizes or operations differ, are known to every member
 * before any byte is written, and the data of members that disagree never
 * meets (Gloo aborts the process on a message of the wrong size). A small
 * all_reduce's payload rides in its head, and the heads are the whole
 * operation: one step where Gloo's ring all_reduce takes 2 (n - 1), which
 * is what a small all_reduce's latency is. send and recv, in a group of two
 * of their own, send the status ahead of the data, in its direction.
 */
#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <netdb.h>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "io.h"
#include "transport.h"

namespace {

using ms = std::chrono::milliseconds;

/* A small all_reduce: the payloads of every other member add up to at most
 * this, and ride in the heads (head_room). */
constexpr uint64_t kGatherMax = 64 * 1024;
/* The heads' slots, apart from those of Gloo's own collectives (gloo/types.h). */
constexpr uint8_t kHeadSlotPrefix = 0x20;

bool write_blob(int fd, const void *p, uint32_t n)
{
        return cube__write_all(fd, &n, 4) == 0 && cube__write_all(fd, p, n) == 0;
}

bool read_blob(int fd, std::string *ret)
{
        uint32_t n;
        if (cube__read_all(fd, &n, 4) < 0 || n > (64u << 20))
                return false;
        ret->resize(n);
        return cube__read_all(fd, &(*ret)[0], n) == 0;
}

/* The store rank 0 serves: the map, the threads answering the others. */
class ServedStore : public gloo::rendezvous::Store {
public:
        ServedStore(int fd, uint64_t nonce, ms timeout) : fd_(fd), nonce_(nonce), timeout_(timeout)
        {
                accepter_ = std::thread([this] { accept_loop(); });
        }
        ~ServedStore() override
        {
                stop_ = true;
                ::shutdown(fd_, SHUT_RDWR);
                accepter_.join();
                {
                        std::lock_guard<std::mutex> g(mu_);
                        for (int c : clients_)
                                ::shutdown(c, SHUT_RDWR);
                }
                cv_.notify_all();
                for (auto &t : threads_)
                        t.join();
                for (int c : clients_)
                        ::close(c);
        }
        void set(const std::string &key, const std::vector<char> &data) override
        {
                std::lock_guard<std::mutex> g(mu_);
                map_[key] = data;
                cv_.notify_all();
        }
        std::vector<char> get(const std::string &key) override
        {
                std::vector<char> v;
                if (!lookup(key, &v))
                        throw std::runtime_error("timed out waiting for member key " + key);
                return v;
        }
        void wait(const std::vector<std::string> &keys) override { wait(keys, timeout_); }
        void wait(const std::vector<std::string> &keys, const ms &) override
        {
                for (auto &k : keys)
                        get(k);
        }

private:
        bool lookup(const std::string &key, std::vector<char> *ret)
        {
                std::unique_lock<std::mutex> g(mu_);
                bool ok = cv_.wait_for(g, timeout_, [&] { return stop_ || map_.count(key); });
                if (!ok || !map_.count(key))
                        return false;
                *ret = map_[key];
                return true;
        }
        void accept_loop()
        {
                while (!stop_) {
                        int c = ::accept(fd_, nullptr, nullptr);
                        if (c < 0) {
                                if (errno == EINTR || errno == ECONNABORTED)
                                        continue;
                                return;
                        }
                        std::lock_guard<std::mutex> g(mu_);
                        clients_.push_back(c);
                        threads_.emplace_back([this, c] { serve(c); });
                }
        }
        /* One member: [nonce], then requests 'S' key value / 'G' key. */
        void serve(int c)
        {
                uint64_t nonce = 0;
                char cmd;
                std::string key, value;
                if (cube__read_all(c, &nonce, 8) < 0 || nonce != nonce_)
                        return;
                while (cube__read_all(c, &cmd, 1) == 0 && read_blob(c, &key)) {
                        if (cmd == 'S') {
                                if (!read_blob(c, &value))
                                        return;
                                set(key, std::vector<char>(value.begin(), value.end()));
                        } else {
                                std::vector<char> v;
                                uint8_t found = lookup(key, &v);
                                if (cube__write_all(c, &found, 1) < 0 ||
                                    (found && !write_blob(c, v.data(), (uint32_t) v.size())))
                                        return;
                        }
                }
        }

        int fd_;
        uint64_t nonce_;
        ms timeout_;
        std::atomic<bool> stop_{false};
        std::mutex mu_;
        std::condition_variable cv_;
        std::map<std::string, std::vector<char>> map_;
        std::vector<int> clients_;
        std::vector<std::thread> threads_;
        std::thread accepter_;
};

/* The store as the other members see it: one connection to rank 0. */
class RemoteStore : public gloo::rendezvous::Store {
public:
        RemoteStore(const char *host, uint16_t port, uint64_t nonce, ms timeout)
        {
                auto deadline = std::chrono::steady_clock::now() + timeout;
                struct timeval tv = { (time_t) (timeout.count() / 1000),
                                      (suseconds_t) (timeout.count() % 1000) * 1000 };
                for (;;) {
                        struct addrinfo hints = {}, *res = nullptr;
                        hints.ai_socktype = SOCK_STREAM;
                        std::string p = std::to_string(port);
                        if (getaddrinfo(host, p.c_str(), &hints, &res) == 0) {
                                fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                                if (fd_ >= 0 && ::connect(fd_, res->ai_addr, res->ai_addrlen) == 0) {
                                        freeaddrinfo(res);
                                        break;
                                }
                                if (fd_ >= 0)
                                        ::close(fd_);
                                fd_ = -1;
                                freeaddrinfo(res);
                        }
                        if (std::chrono::steady_clock::now() > deadline)
                                throw std::runtime_error("rank 0's rendezvous store at " +
                                                         std::string(host) + ":" + p +
                                                         " does not answer");
                        std::this_thread::sleep_for(ms(20));
                }
                setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                if (cube__write_all(fd_, &nonce, 8) < 0)
                        throw std::runtime_error("rank 0's rendezvous store closed");
        }
        ~RemoteStore() override
        {
                if (fd_ >= 0)
                        ::close(fd_);
        }
        void set(const std::string &key, const std::vector<char> &data) override
        {
                char cmd = 'S';
                if (cube__write_all(fd_, &cmd, 1) < 0 ||
                    !write_blob(fd_, key.data(), (uint32_t) key.size()) ||
                    !write_blob(fd_, data.data(), (uint32_t) data.size()))
                        throw std::runtime_error("rank 0's rendezvous store closed");
        }
        std::vector<char> get(const std::string &key) override
        {
                char cmd = 'G';
                uint8_t found = 0;
                std::string v;
                if (cube__write_all(fd_, &cmd, 1) < 0 ||
                    !write_blob(fd_, key.data(), (uint32_t) key.size()) ||
                    cube__read_all(fd_, &found, 1) < 0)
                        throw std::runtime_error("rank 0's rendezvous store closed or timed out");
                if (!found || !read_blob(fd_, &v))
                        throw std::runtime_error("timed out waiting for member key " + key);
                return std::vector<char>(v.begin(), v.end());
        }
        void wait(const std::vector<std::string> &keys) override
        {
                for (auto &k : keys)
                        get(k);
        }
        void wait(const std::vector<std::string> &keys, const ms &) override { wait(keys); }

private:
        int fd_ = -1;
};

/* The reductions: element-wise sums, the mean divides afterwards. */
float h2f(uint16_t h)
{
        uint32_t s = (uint32_t) (h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, f;
        if (e == 0) {
                if (m == 0) {
                        f = s;
                } else {
                        e = 127 - 15 + 1;
                        while (!(m & 0x400)) {
                                m <<= 1;
                                e--;
                        }
                        f = s | (e << 23) | ((m & 0x3ff) << 13);
                }
        } else if (e == 31) {
                f = s | 0x7f800000 | (m << 13);
        } else {
                f = s | ((e + 127 - 15) << 23) | (m << 13);
        }
        float r;
        memcpy(&r, &f, 4);
        return r;
}

uint16_t f2h(float v)
{
        uint32_t f;
        memcpy(&f, &v, 4);
        uint32_t s = (f >> 16) & 0x8000;
        int32_t e = (int32_t) ((f >> 23) & 0xff) - 127 + 15;
        uint32_t m = f & 0x7fffff;
        if (((f >> 23) & 0xff) == 0xff)
                return (uint16_t) (s | 0x7c00 | (m ? 0x200 : 0));
        if (e >= 31)
                return (uint16_t) (s | 0x7c00);
        if (e <= 0) {
                if (e < -10)
                        return (uint16_t) s;
                m |= 0x800000;
                uint32_t shift = (uint32_t) (14 - e);
                uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
                if (rem > half || (rem == half && (h & 1)))
                        h++;
                return (uint16_t) (s | h);
        }
        uint32_t h = s | ((uint32_t) e << 10) | (m >> 13), rem = m & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
                h++;
        return (uint16_t) h;
}

float b2f(uint16_t b)
{
        uint32_t f = (uint32_t) b << 16;
        float r;
        memcpy(&r, &f, 4);
        return r;
}

uint16_t f2b(float v)
{
        uint32_t f;
        memcpy(&f, &v, 4);
        if ((f & 0x7fffffff) > 0x7f800000)
                return (uint16_t) ((f >> 16) | 0x40);
        f += 0x7fff + ((f >> 16) & 1);
        return (uint16_t) (f >> 16);
}

template <typename T> void sum(void *c, const void *a, const void *b, size_t n)
{
        T *o = static_cast<T *>(c);
        const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
        for (size_t i = 0; i < n; i++)
                o[i] = (T) (x[i] + y[i]);
}

template <float (*in)(uint16_t), uint16_t (*out)(float)>
void sum16(void *c, const void *a, const void *b, size_t n)
{
        uint16_t *o = static_cast<uint16_t *>(c);
        const uint16_t *x = static_cast<const uint16_t *>(a), *y = static_cast<const uint16_t *>(b);
        for (size_t i = 0; i < n; i++)
                o[i] = out(in(x[i]) + in(y[i]));
}

size_t elem_size(int dt)
{
        switch (dt) {
        case CUBE__DT_F16: case CUBE__DT_BF16: return 2;
        case CUBE__DT_F32: case CUBE__DT_I32: case CUBE__DT_U32: return 4;
        default: return 8;
        }
}

gloo::AllreduceOptions::Func sum_of(int dt)
{
        switch (dt) {
        case CUBE__DT_F16: return sum16<h2f, f2h>;
        case CUBE__DT_BF16: return sum16<b2f, f2b>;
        case CUBE__DT_F32: return sum<float>;
        case CUBE__DT_F64: return sum<double>;
        case CUBE__DT_I32: return sum<int32_t>;
        case CUBE__DT_I64: return sum<int64_t>;
        case CUBE__DT_U32: return sum<uint32_t>;
        default: return sum<uint64_t>;
        }
}

template <typename T> void divide(void *p, size_t n, uint32_t by)
{
        T *v = static_cast<T *>(p);
        for (size_t i = 0; i < n; i++)
                v[i] = (T) (v[i] / (T) by);
}

void mean(void *p, int dt, size_t n, uint32_t by)
{
        uint16_t *h = static_cast<uint16_t *>(p);
        switch (dt) {
        case CUBE__DT_F16: for (size_t i = 0; i < n; i++) h[i] = f2h(h2f(h[i]) / (float) by); break;
        case CUBE__DT_BF16: for (size_t i = 0; i < n; i++) h[i] = f2b(b2f(h[i]) / (float) by); break;
        case CUBE__DT_F32: divide<float>(p, n, by); break;
        case CUBE__DT_F64: divide<double>(p, n, by); break;
        case CUBE__DT_I32: divide<int32_t>(p, n, by); break;
        case CUBE__DT_I64: divide<int64_t>(p, n, by); break;
        case CUBE__DT_U32: divide<uint32_t>(p, n, by); break;
        default: divide<uint64_t>(p, n, by); break;
        }
}

} // namespace

struct cube__comm {
        std::shared_ptr<gloo::transport::Device> dev;
        std::shared_ptr<gloo::rendezvous::Context> ctx;
        std::vector<std::string> names, cards;
        uint32_t rank = 0, size = 0;
        ms timeout{0};
        uint32_t tag = 0;
        std::atomic<bool> aborted{false};
        std::vector<char> scratch;
};

namespace {

void say(char *why, size_t len, const std::string &s)
{
        snprintf(why, len, "%s", s.c_str());
}

bool ok(cube__comm *c, char *why, size_t len)
{
        if (c->aborted) {
                say(why, len, "the group was torn down");
                return false;
        }
        return true;
}

template <typename Opts> void common(Opts &o, cube__comm *c)
{
        o.setTag(c->tag++);
        o.setTimeout(c->timeout);
}

void all_reduce_raw(cube__comm *c, const void *in, void *out, size_t n, int dt)
{
        gloo::AllreduceOptions o(c->ctx);
        common(o, c);
        size_t es = elem_size(dt);
        /* Gloo types the buffers only by their element size. */
        if (es == 2) {
                o.setInput(const_cast<uint16_t *>(static_cast<const uint16_t *>(in)), n);
                o.setOutput(static_cast<uint16_t *>(out), n);
        } else if (es == 4) {
                o.setInput(const_cast<uint32_t *>(static_cast<const uint32_t *>(in)), n);
                o.setOutput(static_cast<uint32_t *>(out), n);
        } else {
                o.setInput(const_cast<uint64_t *>(static_cast<const uint64_t *>(in)), n);
                o.setOutput(static_cast<uint64_t *>(out), n);
        }
        o.setReduceFunction(sum_of(dt));
        gloo::allreduce(o);
}

/* Whether the data must not move: a member refused, or sizes differ. */
bool anyone(const uint64_t *status, uint32_t n)
{
        for (uint32_t i = 0; i < n; i++)
                if ((status[i] & 1) || (status[i] >> 1) != (status[0] >> 1))
                        return true;
        return false;
}

/* What every member says of an operation before any data moves. */
struct Head {
        uint64_t status;                /* transport.h: (bytes << 1) | refused */
        uint8_t op, dtype, mean, pad;
        uint32_t root;
};
static_assert(sizeof(Head) == 16, "a head is 16 bytes on the wire");

const char *const op_names[] = {
        "?", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send", "recv",
};

/* How much payload a head may carry: what a small all_reduce needs. It
 * depends on the group's size alone, so every member posts receives of the
 * same size whatever operation it runs: a message longer than the receive
 * posted for it makes Gloo abort the process, not fail the operation. */
size_t head_room(uint32_t n)
{
        return kGatherMax / (n > 1 ? n - 1 : 1);
}

/* Every member sends its head, with payload bytes after it, to every
 * other, all at once: one step, where a ring takes n - 1. Slot r of the
 * returned buffer (slot_len bytes each) holds member r's. */
char *exchange_heads(cube__comm *c, const Head &mine, const void *payload, size_t payload_len,
                     size_t *ret_slot_len)
{
        uint32_t n = c->size;
        size_t slot_len = sizeof(Head) + head_room(n);
        auto slot = gloo::Slot::build(kHeadSlotPrefix, c->tag++);

        c->scratch.resize(n * slot_len);
        char *all = c->scratch.data(), *me = all + c->rank * slot_len;
        memcpy(me, &mine, sizeof(mine));
        if (payload_len)
                memcpy(me + sizeof(mine), payload, payload_len);
        auto buf = c->ctx->createUnboundBuffer(all, n * slot_len);
        for (uint32_t r = 0; r < n; r++)
                if (r != c->rank)
                        buf->recv((int) r, slot, r * slot_len, slot_len);
        for (uint32_t r = 0; r < n; r++)
                if (r != c->rank)
                        buf->send((int) r, slot, c->rank * slot_len, sizeof(mine) + payload_len);
        for (uint32_t i = 1; i < n; i++)
                if (!buf->waitRecv(nullptr, c->timeout))
                        throw gloo::IoException("the group was torn down");
        for (uint32_t i = 1; i < n; i++)
                if (!buf->waitSend(nullptr, c->timeout))
                        throw gloo::IoException("the group was torn down");
        *ret_slot_len = slot_len;
        return all;
}

/* The heads' statuses into op->status; 1 with why when the members do not
 * run the same operation, 0 when they do. */
int read_heads(cube__comm *c, cube__coll *op, const char *all, size_t slot_len, char *why,
               size_t len)
{
        const Head *mine = reinterpret_cast<const Head *>(all + c->rank * slot_len);

        for (uint32_t r = 0; r < c->size; r++) {
                Head h;
                memcpy(&h, all + r * slot_len, sizeof(h));
                op->status[r] = h.status;
                if (h.op == mine->op && h.dtype == mine->dtype && h.mean == mine->mean &&
                    h.root == mine->root)
                        continue;
                const char *theirs = h.op < sizeof(op_names) / sizeof(*op_names) ?
                                     op_names[h.op] : "?";
                if (h.op != mine->op)
                        snprintf(why, len, "member %s (rank %u) runs %s where this member runs %s",
                                 c->names[r].c_str(), r, theirs, op_names[mine->op]);
                else if (h.root != mine->root)
                        snprintf(why, len, "member %s (rank %u) names rank %u as the root where "
                                 "this member names rank %u", c->names[r].c_str(), r, h.root,
                                 mine->root);
                else
                        snprintf(why, len, "member %s (rank %u) reduces another way (dtype %u, "
                                 "%s) than this member (dtype %u, %s)", c->names[r].c_str(), r,
                                 h.dtype, h.mean ? "mean" : "sum", mine->dtype,
                                 mine->mean ? "mean" : "sum");
                return 1;
        }
        return 0;
}

int run_op(cube__comm *c, cube__coll *op, char *why, size_t len)
{
        uint32_t n = c->size;
        size_t es = elem_size(op->dtype);

        if (op->op == CUBE__OP_SEND || op->op == CUBE__OP_RECV) {
                /* The status travels first, in the same direction as the data. */
                uint32_t peer = op->root;
                uint64_t head = op->op == CUBE__OP_SEND ? op->status[c->rank] : 0;
                uint64_t want = op->status[c->rank];
                auto hb = c->ctx->createUnboundBuffer(&head, sizeof(head));
                if (op->op == CUBE__OP_SEND) {
                        hb->send((int) peer, 1);
                        if (!hb->waitSend(c->timeout))
                                throw gloo::IoException("timed out sending to the peer");
                        if (head & 1)
                                return 0;
                        auto db = c->ctx->createUnboundBuffer(const_cast<void *>(op->src),
                                                              op->src_bytes);
                        db->send((int) peer, 2);
                        if (!db->waitSend(c->timeout))
                                throw gloo::IoException("timed out sending to the peer");
                } else {
                        hb->recv((int) peer, 1);
                        if (!hb->waitRecv(c->timeout))
                                throw gloo::IoException("timed out receiving from the peer");
                        op->status[peer] = head;
                        if ((head & 1) || (head >> 1) != (want >> 1))
                                return 0;
                        auto db = c->ctx->createUnboundBuffer(op->dst, op->dst_bytes);
                        db->recv((int) peer, 2);
                        if (!db->waitRecv(c->timeout))
                                throw gloo::IoException("timed out receiving from the peer");
                }
                return 0;
        }
        /* A small all_reduce's payload rides in its head: the heads are then
         * the whole operation, reduced here in rank order, so every member
         * gets the same bits. */
        bool refused = op->status[c->rank] & 1;
        bool small = op->op == CUBE__OP_ALL_REDUCE && op->src_bytes <= head_room(n);
        Head mine = { op->status[c->rank], (uint8_t) op->op, (uint8_t) op->dtype,
                      (uint8_t) op->mean, 0, op->root };
        size_t slot_len;
        const char *all = exchange_heads(c, mine, op->src, small && !refused ? op->src_bytes : 0,
                                         &slot_len);
        if (read_heads(c, op, all, slot_len, why, len))
                return 1;
        if (anyone(op->status, n))
                return 0;
        if (small) {
                size_t elems = op->src_bytes / es;
                std::vector<char> out(all + sizeof(Head), all + sizeof(Head) + op->src_bytes);
                auto add = sum_of(op->dtype);
                for (uint32_t r = 1; r < n; r++)
                        add(out.data(), out.data(), all + r * slot_len + sizeof(Head), elems);
                if (op->mean)
                        mean(out.data(), op->dtype, elems, n);
                memcpy(op->dst, out.data(), op->src_bytes);
                return 0;
        }
        switch (op->op) {
        case CUBE__OP_ALL_REDUCE:
                all_reduce_raw(c, op->src, op->dst, op->src_bytes / es, op->dtype);
                if (op->mean)
                        mean(op->dst, op->dtype, op->src_bytes / es, n);
                break;
        case CUBE__OP_REDUCE_SCATTER: {
                std::vector<char> full(op->src_bytes);
                all_reduce_raw(c, op->src, full.data(), op->src_bytes / es, op->dtype);
                memcpy(op->dst, full.data() + (size_t) c->rank * op->dst_bytes, op->dst_bytes);
                if (op->mean)
                        mean(op->dst, op->dtype, op->dst_bytes / es, n);
                break;
        }
        case CUBE__OP_ALL_GATHER: {
                gloo::AllgatherOptions o(c->ctx);
                common(o, c);
                o.setInput(const_cast<char *>(static_cast<const char *>(op->src)), op->src_bytes);
                o.setOutput(static_cast<char *>(op->dst), op->dst_bytes);
                gloo::allgather(o);
                break;
        }
        case CUBE__OP_BROADCAST: {
                gloo::BroadcastOptions o(c->ctx);
                common(o, c);
                o.setRoot((int) op->root);
                if (c->rank == op->root)
                        o.setInput(const_cast<char *>(static_cast<const char *>(op->src)),
                                   op->src_bytes);
                o.setOutput(static_cast<char *>(op->dst), op->dst_bytes);
                gloo::broadcast(o);
                break;
        }
        case CUBE__OP_ALL_TO_ALL: {
                gloo::AlltoallOptions o(c->ctx);
                common(o, c);
                o.setInput(const_cast<char *>(static_cast<const char *>(op->src)), op->src_bytes);
                o.setOutput(static_cast<char *>(op->dst), op->dst_bytes);
                gloo::alltoall(o);
                break;
        }
        }
        return 0;
}

bool gloo_reduces(int dt)
{
        return dt >= 0 && dt < CUBE__DT_MAX;
}

int gloo_join(const cube__comm_setup *s, cube__comm **ret, char *why, size_t len)
{
        auto c = std::unique_ptr<cube__comm>(new cube__comm);
        ms timeout(s->timeout_ms);

        c->rank = s->rank;
        c->size = s->size;
        c->timeout = timeout;
        try {
                std::unique_ptr<gloo::rendezvous::Store> store;
                if (s->rank == 0)
                        store.reset(new ServedStore(s->store_fd, s->nonce, timeout));
                else
                        store.reset(new RemoteStore(s->store_host, s->store_port, s->nonce,
                                                    timeout));
                gloo::transport::tcp::attr attr;
                attr.hostname = s->address;
                c->dev = gloo::transport::tcp::CreateDevice(attr);
                c->ctx = std::make_shared<gloo::rendezvous::Context>((int) s->rank, (int) s->size);
                c->ctx->setTimeout(timeout);
                std::string me(s->name);
                store->set("name/" + std::to_string(s->rank), std::vector<char>(me.begin(), me.end()));
                std::string card(s->card ? s->card : "");
                store->set("card/" + std::to_string(s->rank),
                           std::vector<char>(card.begin(), card.end()));
                c->ctx->connectFullMesh(*store, c->dev);
                for (uint32_t r = 0; r < s->size; r++) {
                        auto v = store->get("name/" + std::to_string(r));
                        c->names.emplace_back(v.begin(), v.end());
                        auto k = store->get("card/" + std::to_string(r));
                        c->cards.emplace_back(k.begin(), k.end());
                }
                /* Everyone is past the store once this returns. */
                gloo::BarrierOptions b(c->ctx);
                b.setTag(c->tag++);
                b.setTimeout(timeout);
                gloo::barrier(b);
        } catch (const std::exception &e) {
                say(why, len, e.what());
                return -1;
        }
        *ret = c.release();
        return 0;
}

const char *gloo_member(cube__comm *c, uint32_t rank)
{
        return rank < c->names.size() ? c->names[rank].c_str() : "?";
}

const char *gloo_member_card(cube__comm *c, uint32_t rank)
{
        return rank < c->cards.size() ? c->cards[rank].c_str() : "";
}

int gloo_run(cube__comm *c, cube__coll *op, char *why, size_t len)
{
        if (!ok(c, why, len))
                return -1;
        int rc;
        try {
                rc = run_op(c, op, why, len);
        } catch (const std::exception &e) {
                say(why, len, c->aborted ? "the group was torn down" : e.what());
                return -1;
        }
        return ok(c, why, len) ? rc : -1;
}

void gloo_abort(cube__comm *c)
{
        c->aborted = true;
}

void gloo_close(cube__comm *c)
{
        try {
                c->ctx.reset();
                c->dev.reset();
        } catch (...) {
        }
        delete c;
}

const cube__transport gloo_transport = {
        "gloo", gloo_reduces, gloo_join, gloo_member, gloo_member_card, gloo_run, gloo_abort,
        gloo_close,
};

} // namespace

extern "C" const cube__transport *cube__transport_for(const char *backend)
{
        return strcmp(backend, "cpu") == 0 ? &gloo_transport : nullptr;
}
