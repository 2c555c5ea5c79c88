/*
 * tenants.c - device time as the operator shares it: each session's weight,
 * class and tenant, the device time each has used, and the rules the
 * executor (executor.c) asks before it hands a session's work to the device.
 *
 * Device time is what the backend measured around each piece of work
 * (cube__work's start_ns and end_ns), counted as the work completes. When a
 * piece of work is submitted its time is not known yet: it is charged at an
 * estimate (the last times of the same kernel in the same session, else the
 * session's mean), and corrected by the measured time on completion.
 *
 * The rules, in the order the executor applies them:
 *  - a class below the best class present on the device (a session of it
 *    had work in the last window) may hold at most share-bound-us of
 *    expected device time on the device: a latency launch waits for that
 *    and for what was already running, not for a device full of batch work;
 *  - the best class with work goes first, unless a lower class is owed its
 *    minimum share (share-min-percent of the device time used meanwhile);
 *  - within a class, the session with the least virtual time goes first:
 *    device time divided by weight (start-time fair queuing), so weights
 *    1:9 share the device 1:9 whatever the lengths of their kernels;
 *  - a tenant with a cap is held to it by a bucket refilled at cap percent
 *    of wall time, while another tenant wants the device or, with
 *    cap-alone=yes, always.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cubed.h"

#define BURST_NS 20000000ull            /* the most a capped tenant banks: 20 ms */
#define UNKNOWN_NS 100000ull            /* a first launch of a first kernel: 0.1 ms */

static uint64_t window_ns(const cube__server *srv)
{
        return (uint64_t) srv->opts.share_window_ms * 1000000ull;
}

/* Moves w on to the window now falls in: the one before it is kept for the
 * views, anything older is forgotten. */
static void roll(const cube__server *srv, cube__window_ns *w, uint64_t now)
{
        uint64_t idx = (now - srv->started_ns) / window_ns(srv);

        if (idx == w->idx)
                return;
        w->last = idx == w->idx + 1 ? w->cur : 0;
        w->cur = 0;
        w->idx = idx;
}

static void count(const cube__server *srv, cube__window_ns *w, uint64_t ns, uint64_t now)
{
        roll(srv, w, now);
        w->cur += ns;
}

uint64_t cube__window_last(const cube__server *srv, cube__window_ns *w)
{
        roll(srv, w, uv_hrtime());
        return w->last;
}

static cube__tenant *tenant_get(cube__server *srv, const char *name)
{
        cube__tenant *t;

        for (t = srv->shares.tenants; t; t = t->next)
                if (strcmp(t->name, name) == 0)
                        return t;
        if (!(t = calloc(1, sizeof(*t))))
                return NULL;
        snprintf(t->name, sizeof(t->name), "%s", name);
        t->refilled_ns = uv_hrtime();
        t->next = srv->shares.tenants;
        srv->shares.tenants = t;
        return t;
}

static void tenant_put(cube__server *srv, cube__tenant *t)
{
        if (!t || --t->sessions > 0)
                return;
        for (cube__tenant **p = &srv->shares.tenants; *p; p = &(*p)->next)
                if (*p == t) {
                        *p = t->next;
                        break;
                }
        free(t);
}

/* The operator's terms, lowered by what the session asked for. */
static void apply_terms(cube__session *s)
{
        cube__server *srv = s->server;
        cube__share *sh = &s->share;
        char name[sizeof(((cube__tenant *) 0)->name)];
        cube__tenant *t;

        cube__share_terms_for(&srv->opts, s->uid, s->gid, &sh->terms);
        sh->weight = sh->terms.weight;
        if (sh->asked_weight && sh->asked_weight < sh->weight)
                sh->weight = sh->asked_weight;
        cube__class was = sh->class_;
        sh->class_ = sh->terms.class_;
        if (sh->asked_class > (int) sh->class_)
                sh->class_ = (cube__class) sh->asked_class;
        /* Virtual times of two classes do not compare: it starts level with
         * its new class. */
        if (sh->class_ != was)
                sh->vtime = srv->shares.vnow[sh->class_];
        if (*sh->terms.tenant)
                snprintf(name, sizeof(name), "%s", sh->terms.tenant);
        else
                snprintf(name, sizeof(name), "uid:%u", (unsigned) s->uid);
        if (sh->tenant && strcmp(sh->tenant->name, name) == 0) {
                t = sh->tenant;
        } else if ((t = tenant_get(srv, name))) {
                t->sessions++;
                tenant_put(srv, sh->tenant);
                sh->tenant = t;
        } else {
                t = sh->tenant;         /* out of memory: it stays where it was */
        }
        if (t) {
                t->cap_percent = sh->terms.cap_percent;
                t->cap_alone = sh->terms.cap_alone;
        }
}

void cube__share_attach(cube__session *s)
{
        s->share.asked_class = -1;
        s->share.class_ = CUBE__CLASS_NORMAL;
        s->share.vtime = s->server->shares.vnow[CUBE__CLASS_NORMAL];
        apply_terms(s);
}

void cube__share_detach(cube__session *s)
{
        tenant_put(s->server, s->share.tenant);
        s->share.tenant = NULL;
}

void cube__shares_reload(cube__server *srv)
{
        for (cube__session *s = srv->sessions; s; s = s->next)
                apply_terms(s);
        cube__schedule(srv);
}

cube_error *cube__share_lower(cube__session *s, int class_, uint32_t weight)
{
        cube__share *sh = &s->share;

        if (class_ >= 0 && class_ < (int) sh->terms.class_)
                return cube__err_validation("class %s is above this session's class %s: a "
                                            "session may lower its class, never raise it",
                                            cube__class_name((cube__class) class_),
                                            cube__class_name(sh->terms.class_));
        if (weight > sh->terms.weight)
                return cube__err_validation("weight %u is above this session's weight %u: a "
                                            "session may lower its weight, never raise it",
                                            weight, sh->terms.weight);
        if (class_ >= 0)
                sh->asked_class = class_;
        if (weight)
                sh->asked_weight = weight;
        apply_terms(s);
        return NULL;
}

/* The estimate slot of the work o runs: a launch by its kernel, a replay
 * by its graph, anything else by its kind. */
static const void *estimate_key(const cube__op *o)
{
        if (o->graph)
                return o->graph;
        if (o->launch)
                return o->launch->module ? (const void *) o->launch->module : o->launch->kernel;
        return (const void *) (uintptr_t) (o->work.op + 1);
}

static uint64_t estimate(const cube__share *sh, const void *key)
{
        for (size_t i = 0; i < CUBE__ESTIMATES; i++)
                if (sh->est[i].key == key)
                        return sh->est[i].ns;
        return sh->mean_ns ? sh->mean_ns : UNKNOWN_NS;
}

static void learn(cube__share *sh, const void *key, uint64_t ns)
{
        size_t i;

        for (i = 0; i < CUBE__ESTIMATES && sh->est[i].key != key; i++)
                ;
        if (i == CUBE__ESTIMATES) {
                i = sh->est_next++ % CUBE__ESTIMATES;
                sh->est[i].key = key;
                sh->est[i].ns = ns;
        } else {
                sh->est[i].ns = (sh->est[i].ns * 3 + ns) / 4;
        }
        sh->mean_ns = sh->mean_ns ? (sh->mean_ns * 7 + ns) / 8 : ns;
}

/* Refills a capped tenant's bucket to now. */
static void refill(cube__tenant *t, uint64_t now)
{
        if (now <= t->refilled_ns)
                return;
        t->credit_ns += (double) (now - t->refilled_ns) * t->cap_percent / 100.0;
        if (t->credit_ns > (double) BURST_NS * t->cap_percent / 100.0)
                t->credit_ns = (double) BURST_NS * t->cap_percent / 100.0;
        t->refilled_ns = now;
}

/* Whether a session of another tenant than t has work waiting. */
static bool others_want(const cube__server *srv, const cube__tenant *t)
{
        for (const cube__session *s = srv->sessions; s; s = s->next)
                if (s->share.tenant != t && s->active_head)
                        return true;
        return false;
}

/* The best class that had work on the device in the last window. */
static int top_class(const cube__server *srv, uint64_t now)
{
        for (int c = 0; c < CUBE__CLASSES; c++)
                if (srv->shares.active_ns[c] && srv->shares.active_ns[c] + window_ns(srv) > now)
                        return c;
        return CUBE__CLASSES;
}

void cube__shares_pass(cube__server *srv, uint64_t now)
{
        srv->shares.top = top_class(srv, now);
}

bool cube__share_may_submit(cube__session *s, uint64_t now)
{
        cube__server *srv = s->server;
        cube__shares *ss = &srv->shares;
        cube__tenant *t = s->share.tenant;

        if ((int) s->share.class_ > ss->top) {
                uint64_t lower = 0;
                for (int c = ss->top + 1; c < CUBE__CLASSES; c++)
                        lower += ss->est_ns[c];
                if (lower >= (uint64_t) srv->opts.share_bound_us * 1000ull)
                        return false;
        }
        if (t && t->cap_percent && t->cap_percent < 100) {
                refill(t, now);
                if (t->credit_ns <= 0 && (t->cap_alone || others_want(srv, t))) {
                        uint64_t wait = (uint64_t) (-t->credit_ns * 100.0 / t->cap_percent) + 1;
                        if (!ss->hold_ns || wait < ss->hold_ns)
                                ss->hold_ns = wait;
                        return false;
                }
        }
        return true;
}

bool cube__shares_room(const cube__server *srv)
{
        uint64_t held = 0;

        for (int c = 0; c < CUBE__CLASSES; c++)
                held += srv->shares.est_ns[c];
        return !srv->submitted || held < (uint64_t) srv->opts.share_queue_us * 1000ull;
}

/* Whether a goes before b: a class owed its minimum share, then the better
 * class, then the lesser virtual time. */
bool cube__share_before(const cube__session *a, const cube__session *b)
{
        const cube__shares *ss = &a->server->shares;
        bool owed_a = a->share.class_ > 0 && ss->credit[a->share.class_] > 0;
        bool owed_b = b->share.class_ > 0 && ss->credit[b->share.class_] > 0;

        if (owed_a != owed_b)
                return owed_a;
        if (a->share.class_ != b->share.class_)
                return a->share.class_ < b->share.class_;
        return a->share.vtime < b->share.vtime;
}

void cube__share_wake(cube__session *s)
{
        double vnow = s->server->shares.vnow[s->share.class_];

        if (s->share.vtime < vnow)
                s->share.vtime = vnow;
}

void cube__share_submitted(cube__op *o, uint64_t now)
{
        cube__session *s = o->session;
        cube__server *srv = s->server;
        cube__share *sh = &s->share;
        double vnow = srv->shares.vnow[sh->class_];

        if (sh->vtime > vnow)
                srv->shares.vnow[sh->class_] = sh->vtime;
        o->est_ns = estimate(sh, estimate_key(o));
        o->est_class = sh->class_;
        sh->vtime += (double) o->est_ns / sh->weight;
        sh->est_ns += o->est_ns;
        srv->shares.est_ns[sh->class_] += o->est_ns;
        srv->shares.active_ns[sh->class_] = now;
        if (sh->tenant && sh->tenant->cap_percent)
                sh->tenant->credit_ns -= (double) o->est_ns;
}

void cube__share_done(cube__op *o)
{
        cube__session *s = o->session;
        cube__server *srv = s->server;
        cube__shares *ss = &srv->shares;
        cube__share *sh = &s->share;
        uint64_t now = cube__schedule_now(srv);
        uint64_t ns = o->work.end_ns > o->work.start_ns ? o->work.end_ns - o->work.start_ns : 0;
        double burst = (double) window_ns(srv) * srv->opts.share_min_percent / 100.0;

        if (o->work.start_ns && (o->launch || o->graph))
                learn(sh, estimate_key(o), ns);
        if (o->submitted) {
                sh->est_ns -= o->est_ns;
                ss->est_ns[o->est_class] -= o->est_ns;
                ss->active_ns[o->est_class] = now;
        }
        sh->vtime += ((double) ns - (double) o->est_ns) / sh->weight;
        if (sh->tenant && sh->tenant->cap_percent)
                sh->tenant->credit_ns -= (double) ns - (double) o->est_ns;
        if (!ns)
                return;
        sh->device_ns += ns;
        count(srv, &sh->window, ns, now);
        if (sh->tenant) {
                sh->tenant->device_ns += ns;
                count(srv, &sh->tenant->window, ns, now);
        }
        count(srv, &ss->window, ns, now);
        /* Each class below the one that ran is owed its floor of this time;
         * the one that ran pays for its own. */
        for (int c = 1; c < CUBE__CLASSES; c++) {
                if (c == (int) sh->class_)
                        ss->credit[c] -= (double) ns;
                else
                        ss->credit[c] += (double) ns * srv->opts.share_min_percent / 100.0;
                if (ss->credit[c] > burst)
                        ss->credit[c] = burst;
                if (ss->credit[c] < -burst)
                        ss->credit[c] = -burst;
        }
}

/* The share a session is owed: its weight over the weights of the sessions
 * of the best class present that used the device in the last window or
 * want it now (no more than its tenant's cap), in per mille. */
uint32_t cube__share_owed(cube__session *s)
{
        cube__server *srv = s->server;
        uint64_t total = 0;
        int top = top_class(srv, uv_hrtime());
        uint32_t owed;

        for (cube__session *o = srv->sessions; o; o = o->next)
                if ((o->active_head || o->share.est_ns || cube__window_last(srv, &o->share.window)) &&
                    (int) o->share.class_ <= (top < CUBE__CLASSES ? top : CUBE__CLASSES - 1))
                        total += o->share.weight;
        if (!total || (int) s->share.class_ > top)
                owed = (int) s->share.class_ > top ? srv->opts.share_min_percent * 10 : 1000;
        else
                owed = (uint32_t) ((uint64_t) s->share.weight * 1000 / total);
        if (s->share.tenant && s->share.tenant->cap_percent &&
            owed > s->share.tenant->cap_percent * 10)
                owed = s->share.tenant->cap_percent * 10;
        return owed;
}

static void on_hold_over(uv_timer_t *h)
{
        cube__schedule(h->data);
}

void cube__shares_hold(cube__server *srv)
{
        cube__shares *ss = &srv->shares;

        uint64_t hold = ss->hold_ns;

        ss->hold_ns = 0;
        if (!hold || srv->stopping)
                return;
        if (!ss->timer_ready) {
                uv_timer_init(srv->loop, &ss->timer);
                ss->timer.data = srv;
                ss->timer_ready = true;
        }
        uv_timer_start(&ss->timer, on_hold_over, hold / 1000000 + 1, 0);
}

void cube__shares_done(cube__server *srv)
{
        if (srv->shares.timer_ready && !uv_is_closing((uv_handle_t *) &srv->shares.timer))
                uv_close((uv_handle_t *) &srv->shares.timer, NULL);
}

/* Sends the answer packed in sb, or an error when packing it failed (r). */
static cube__dispatched answer(cube__msg *k, msgpack_sbuffer *sb, int r)
{
        if (r == 0)
                cube__reply_sbuffer(k->session, sb);
        else
                cube__reply_owned_error(k, NULL);
        msgpack_sbuffer_destroy(sb);
        return CUBE__DISPATCH_DONE;
}

/* share [class, weight]: the session lowers its own class (a name, or nil
 * to keep it) or weight (0 or nil to keep it). Answers what it now has. */
cube__dispatched cube__do_share(cube__msg *k)
{
        cube__session *s = k->session;
        char name[16];
        int class_ = -1;
        uint32_t weight = 0;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        cube_error *e;
        int r = 0;

        if (k->n != 2 ||
            (k->p[0].type != MSGPACK_OBJECT_NIL && !cube__obj_str(&k->p[0], name, sizeof(name))) ||
            (k->p[1].type != MSGPACK_OBJECT_NIL && !cube__obj_u32(&k->p[1], &weight))) {
                cube__reply_malformed(k, "params must be [class or nil, weight or nil]");
                return CUBE__DISPATCH_DONE;
        }
        if (k->p[0].type != MSGPACK_OBJECT_NIL && (class_ = cube__class_parse(name)) < 0) {
                cube__reply_owned_error(k, cube__err_validation("'%s' is no class: say latency, "
                                                                "normal or batch", name));
                return CUBE__DISPATCH_DONE;
        }
        if ((e = cube__share_lower(s, class_, weight))) {
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        cube__schedule(s->server);
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        r |= cube__pack_response_ok(&pk, k->env->msgid);
        r |= msgpack_pack_map(&pk, 3);
        r |= cube__pack_kv_str(&pk, "class", cube__class_name(s->share.class_));
        r |= cube__pack_kv_u64(&pk, "weight", s->share.weight);
        r |= cube__pack_kv_str(&pk, "tenant", s->share.tenant ? s->share.tenant->name : "");
        return answer(k, &sb, r);
}

/* A line of the shares view: a session's, or a tenant's (session 0). */
static int pack_line(msgpack_packer *pk, uint64_t session, uint32_t uid, const char *name,
                     const char *tenant, uint32_t weight, cube__class class_, uint32_t cap,
                     uint64_t device_ns, uint64_t window, uint64_t total, uint32_t owed)
{
        int r = msgpack_pack_map(pk, 11);

        r |= cube__pack_kv_u64(pk, "session", session);
        r |= cube__pack_kv_u64(pk, "uid", uid);
        r |= cube__pack_kv_str(pk, "name", name);
        r |= cube__pack_kv_str(pk, "tenant", tenant);
        r |= cube__pack_kv_u64(pk, "weight", weight);
        r |= cube__pack_kv_str(pk, "class", cube__class_name(class_));
        r |= cube__pack_kv_u64(pk, "cap", cap);
        r |= cube__pack_kv_u64(pk, "device_ns", device_ns);
        r |= cube__pack_kv_u64(pk, "window_ns", window);
        r |= cube__pack_kv_u64(pk, "share", total ? window * 1000 / total : 0);
        r |= cube__pack_kv_u64(pk, "owed", owed);
        return r;
}

static bool share_visible(const cube__msg *k, const cube__session *s)
{
        return cube__uid_is_admin(k->session->uid) || s->uid == k->session->uid;
}

/* shares []: every visible session's weight, class, tenant, device time
 * and share of the last window beside the share it is owed; then one line
 * per tenant of those sessions, adding them up. */
cube__dispatched cube__do_shares(cube__msg *k)
{
        cube__server *srv = k->server;
        uint64_t total = cube__window_last(srv, &srv->shares.window);
        uint32_t n = 0;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int r = 0;

        for (cube__tenant *t = srv->shares.tenants; t; t = t->next)
                t->shown = false;
        for (cube__session *s = srv->sessions; s; s = s->next)
                if (share_visible(k, s)) {
                        n++;
                        if (s->share.tenant && !s->share.tenant->shown) {
                                s->share.tenant->shown = true;
                                n++;
                        }
                }
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        r |= cube__pack_response_ok(&pk, k->env->msgid);
        r |= msgpack_pack_array(&pk, n);
        for (cube__session *s = srv->sessions; s; s = s->next)
                if (share_visible(k, s))
                        r |= pack_line(&pk, s->id, s->uid, s->name,
                                       s->share.tenant ? s->share.tenant->name : "",
                                       s->share.weight, s->share.class_,
                                       s->share.tenant ? s->share.tenant->cap_percent : 0,
                                       s->share.device_ns, cube__window_last(srv, &s->share.window),
                                       total, cube__share_owed(s));
        for (cube__tenant *t = srv->shares.tenants; t; t = t->next) {
                uint32_t weight = 0, owed = 0;
                cube__class best = CUBE__CLASSES;
                uid_t uid = 0;
                if (!t->shown)
                        continue;
                for (cube__session *s = srv->sessions; s; s = s->next)
                        if (s->share.tenant == t) {
                                weight += s->share.weight;
                                owed += cube__share_owed(s);
                                uid = s->uid;
                                if (s->share.class_ < best)
                                        best = s->share.class_;
                        }
                if (t->cap_percent && owed > t->cap_percent * 10)
                        owed = t->cap_percent * 10;
                r |= pack_line(&pk, 0, uid, "", t->name, weight,
                               best < CUBE__CLASSES ? best : CUBE__CLASS_NORMAL, t->cap_percent,
                               t->device_ns, cube__window_last(srv, &t->window), total,
                               owed > 1000 ? 1000 : owed);
        }
        return answer(k, &sb, r);
}

/* The shares view as metrics: per session and per tenant, labelled with
 * the session id or the tenant's name. */
void cube__shares_metrics(cube__server *srv, FILE *f, const char *instance)
{
        uint64_t total = cube__window_last(srv, &srv->shares.window);
        static const struct { const char *name, *type, *help; } m[] = {
                { "cube_share_weight", "gauge", "Weight in force." },
                { "cube_share_class", "gauge", "Class in force: 0 latency, 1 normal, 2 batch." },
                { "cube_share_device_seconds", "gauge", "Device time of completed work, while "
                  "the session or tenant lives." },
                { "cube_share_ratio", "gauge", "Part of the device time of the last window." },
                { "cube_share_owed_ratio", "gauge", "Part of the device time it is owed." },
        };

        for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
                fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m[i].name, m[i].help, m[i].name,
                        m[i].type);
                for (cube__session *s = srv->sessions; s; s = s->next) {
                        double v[] = { s->share.weight, s->share.class_,
                                       (double) s->share.device_ns / 1e9,
                                       total ? (double) cube__window_last(srv, &s->share.window) /
                                               (double) total : 0,
                                       cube__share_owed(s) / 1000.0 };
                        fprintf(f, "%s{instance=\"%s\",session=\"%" PRIu64 "\",tenant=\"%s\"} %g\n",
                                m[i].name, instance, s->id,
                                s->share.tenant ? s->share.tenant->name : "", v[i]);
                }
                for (cube__tenant *t = srv->shares.tenants; t; t = t->next) {
                        double weight = 0, owed = 0, best = CUBE__CLASSES;
                        for (cube__session *s = srv->sessions; s; s = s->next)
                                if (s->share.tenant == t) {
                                        weight += s->share.weight;
                                        owed += cube__share_owed(s) / 1000.0;
                                        if (s->share.class_ < best)
                                                best = s->share.class_;
                                }
                        if (t->cap_percent && owed > t->cap_percent / 100.0)
                                owed = t->cap_percent / 100.0;
                        double v[] = { weight, best, (double) t->device_ns / 1e9,
                                       total ? (double) cube__window_last(srv, &t->window) /
                                               (double) total : 0,
                                       owed > 1 ? 1 : owed };
                        fprintf(f, "%s{instance=\"%s\",tenant=\"%s\"} %g\n", m[i].name, instance,
                                t->name, v[i]);
                }
        }
}
