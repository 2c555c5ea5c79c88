/*
 * access.c - who may connect, how many sessions they may hold, and what
 * each user holds across its sessions.
 *
 * The socket's mode and group are the first gate. allow-uids and
 * allow-groups narrow it further: a peer connects only if its uid is listed
 * or it is a member of a listed group (its primary group or a supplementary
 * one). Root and the daemon's own user are always let in, so an operator can
 * always inspect the daemon; they are also exempt from the session quotas
 * and the per-user bounds, and their regions may take the mappings
 * map-reserve keeps from everyone else.
 *
 * Names in the lists are resolved once, when the configuration loads
 * (config.c); at accept the peer's uid and groups come from the kernel (SO_PEERCRED and
 * SO_PEERGROUPS), so nothing on the loop reads /etc/passwd or /proc.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "services.h"

bool cube__id_listed(const cube__id_list *l, uint32_t id)
{
        for (size_t i = 0; i < l->n; i++)
                if (l->ids[i] == id)
                        return true;
        return false;
}

int cube__peer_groups(int fd, gid_t **ret_groups, size_t *ret_n)
{
        socklen_t len = 64 * sizeof(gid_t);
        gid_t *g = NULL;

        *ret_groups = NULL;
        *ret_n = 0;
        for (int tries = 0; tries < 4; tries++) {
                gid_t *grown = realloc(g, len ? len : sizeof(gid_t));
                if (!grown) {
                        free(g);
                        return -ENOMEM;
                }
                g = grown;
                if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) == 0) {
                        *ret_groups = g;
                        *ret_n = len / sizeof(gid_t);
                        return 0;
                }
                if (errno != ERANGE)
                        break;
        }
        free(g);
        return -errno;
}

bool cube__uid_is_admin(uid_t uid)
{
        return uid == 0 || uid == geteuid();
}

bool cube__access_refused(const cube__options *o, const struct ucred *cred,
                          const gid_t *groups, size_t n_groups, char *why, size_t len)
{
        const cube__id_list *uids = &o->allow_uid_ids, *gids = &o->allow_gid_ids;

        if (!uids->set && !gids->set)
                return false;
        if (cred->uid == 0 || cred->uid == geteuid())
                return false;
        if (cube__id_listed(uids, cred->uid) || cube__id_listed(gids, cred->gid))
                return false;
        for (size_t i = 0; i < n_groups; i++)
                if (cube__id_listed(gids, groups[i]))
                        return false;
        snprintf(why, len, "uid %u may not use this daemon: it is not in allow-uids, nor a member "
                 "of allow-groups", (unsigned) cred->uid);
        return true;
}

cube__uid *cube__uid_get(cube__users *users, uid_t uid)
{
        cube__uid *u = cube__idmap_get(&users->uids, uid);

        if (u)
                return u;
        u = calloc(1, sizeof(*u));
        if (u && cube__idmap_put(&users->uids, uid, u) < 0) {
                free(u);
                u = NULL;
        }
        return u;
}

void cube__poison_blame(const cube__options *o, cube__users *users, const cube__log_who *s)
{
        uint32_t after = o->poison_ban_after;
        uint64_t until = uv_hrtime() + (uint64_t) o->poison_ban_s * 1000000000ull;
        cube__uid *u;

        if (!after || !s)
                return;
        /* Root and the daemon's user are never refused by uid (an operator
         * can always look), but their names are. */
        if (s->uid != 0 && s->uid != geteuid() && (u = cube__uid_get(users, s->uid)) &&
            ++u->poisons >= after) {
                u->banned_until_ns = until;
                u->poisons = 0;
                cube__log_at(CUBE__HERE(NULL), CUBE__LOG_WARNING, s, 0, "uid %u has poisoned the "
                             "device %u time(s): its sessions are refused for %u s "
                             "(poison-ban-after)", (unsigned) s->uid, after, o->poison_ban_s);
        }
        if (!s->name || !*s->name)
                return;
        /* Its entry, else an empty one, else the one whose ban ends first. */
        cube__name_ban *slot = NULL, *oldest = NULL;
        for (size_t i = 0; i < CUBE__NAME_BANS && !slot; i++) {
                cube__name_ban *b = &users->name_bans[i];
                if (strcmp(b->name, s->name) == 0)
                        slot = b;
                else if (!oldest || (*oldest->name && (!*b->name ||
                                     b->banned_until_ns < oldest->banned_until_ns)))
                        oldest = b;
        }
        if (!slot) {
                slot = oldest;
                *slot = (cube__name_ban) {0};
                snprintf(slot->name, sizeof(slot->name), "%s", s->name);
        }
        if (++slot->poisons >= after) {
                slot->banned_until_ns = until;
                slot->poisons = 0;
                cube__log_at(CUBE__HERE(NULL), CUBE__LOG_WARNING, s, 0, "sessions named '%s' have "
                             "poisoned the device %u time(s): the name is refused for %u s "
                             "(poison-ban-after)", s->name, after, o->poison_ban_s);
        }
}

bool cube__name_banned(const cube__options *o, const cube__users *users, const char *name,
                       char *why, size_t len)
{
        uint64_t now = uv_hrtime();

        for (size_t i = 0; *name && i < CUBE__NAME_BANS; i++) {
                const cube__name_ban *b = &users->name_bans[i];
                if (strcmp(b->name, name) == 0 && b->banned_until_ns > now) {
                        snprintf(why, len, "sessions named '%s' poisoned the device %u time(s): "
                                 "the name is refused for another %llu s", name,
                                 o->poison_ban_after,
                                 (unsigned long long) ((b->banned_until_ns - now) / 1000000000ull + 1));
                        return true;
                }
        }
        return false;
}

bool cube__session_quota_full(const cube__options *o, const cube__users *users,
                              uint32_t n_sessions, uid_t uid, char *why, size_t len)
{
        cube__uid *u = cube__idmap_get(&users->uids, uid);
        uint64_t now = uv_hrtime();

        if (uid == 0 || uid == geteuid())
                return false;
        if (u && u->banned_until_ns > now) {
                snprintf(why, len, "uid %u poisoned the device %u time(s): it is refused for "
                         "another %llu s (poison-ban-after)", (unsigned) uid,
                         o->poison_ban_after,
                         (unsigned long long) ((u->banned_until_ns - now) / 1000000000ull + 1));
                return true;
        }
        if (o->max_sessions && n_sessions >= o->max_sessions) {
                snprintf(why, len, "the daemon serves its most sessions already (max-sessions, "
                         "%u); try again once one has ended", o->max_sessions);
                return true;
        }
        if (o->max_sessions_per_uid && u && u->sessions >= o->max_sessions_per_uid) {
                snprintf(why, len, "uid %u has %u sessions, the most max-sessions-per-uid allows",
                         (unsigned) uid, u->sessions);
                return true;
        }
        return false;
}

int cube__socket_set_group(const char *path, const char *group)
{
        cube__id_list l;
        char why[128];
        gid_t gid;

        if (cube__id_list_parse(group, true, &l, why, sizeof(why)) < 0 || l.n != 1) {
                free(l.ids);
                cube__log(CUBE__LOG_ERR, "socket-group %s names no group", group);
                return -ENOENT;
        }
        gid = (gid_t) l.ids[0];
        free(l.ids);
        /* Never through a symlink: one planted in its place would give a
         * file of the attacker's choosing the group. */
        if (fchownat(AT_FDCWD, path, (uid_t) -1, gid, AT_SYMLINK_NOFOLLOW) < 0) {
                cube__log(CUBE__LOG_ERR, "cannot give %s the group %s: %s", path, group,
                          strerror(errno));
                return -errno;
        }
        return 0;
}

/* The per-user bounds are per-user sums over sessions, so one user with many
 * sessions holds no more than one with a single session may; the daemon-wide
 * ones bound every user together. */
const char *cube__kernel_bound(const cube__options *o, const cube__users *users, uid_t uid,
                               uint64_t bytes, uint64_t *ret_limit)
{
        const cube__uid *u = cube__idmap_get(&users->uids, uid);

        if (!cube__uid_is_admin(uid) && u) {
                if (u->kernels >= o->uid_kernels) {
                        *ret_limit = o->uid_kernels;
                        return "uid-kernels";
                }
                if (bytes > o->uid_kernel_source_bytes ||
                    u->kernel_source_bytes > o->uid_kernel_source_bytes - bytes) {
                        *ret_limit = o->uid_kernel_source_bytes;
                        return "uid-kernel-source-bytes";
                }
        }
        if (users->kernels >= o->daemon_kernels) {
                *ret_limit = o->daemon_kernels;
                return "daemon-kernels";
        }
        if (bytes > o->daemon_kernel_source_bytes ||
            users->kernel_source_bytes > o->daemon_kernel_source_bytes - bytes) {
                *ret_limit = o->daemon_kernel_source_bytes;
                return "daemon-kernel-source-bytes";
        }
        return NULL;
}

void cube__kernels_held(cube__users *users, uid_t uid, int64_t kernels, int64_t bytes)
{
        cube__uid *u = cube__uid_get(users, uid);

        users->kernels += (uint64_t) kernels;
        users->kernel_source_bytes += (uint64_t) bytes;
        if (u) {
                u->kernels += (uint64_t) kernels;
                u->kernel_source_bytes += (uint64_t) bytes;
        }
}

const char *cube__region_bound(const cube__options *o, const cube__users *users, uid_t uid,
                               uint64_t *ret_limit)
{
        const cube__uid *u = cube__idmap_get(&users->uids, uid);
        bool admin = cube__uid_is_admin(uid);
        uint64_t room = users->map_room, reserve = admin ? 0 : o->map_reserve;

        if (!admin && u && u->regions >= o->uid_regions) {
                *ret_limit = o->uid_regions;
                return "uid-regions";
        }
        room = room > reserve ? room - reserve : 0;
        if (users->regions + 1 > room) {
                *ret_limit = room;
                return admin ? "vm.max_map_count" : "map-reserve";
        }
        return NULL;
}

void cube__regions_held(cube__users *users, uid_t uid, int delta)
{
        cube__uid *u = cube__uid_get(users, uid);

        users->regions += (uint64_t) (int64_t) delta;
        if (u)
                u->regions += (uint32_t) delta;
}

/* Read at start: every later region is one mapping more. The margin is for
 * the daemon's own later mappings (threads, peers' memory, the heap). */
uint64_t cube__map_room(void)
{
        FILE *f = fopen("/proc/sys/vm/max_map_count", "re");
        uint64_t max = 65530, have = 0;
        char line[512];

        if (f) {
                if (fscanf(f, "%" SCNu64, &max) != 1)
                        max = 65530;
                fclose(f);
        }
        if ((f = fopen("/proc/self/maps", "re"))) {
                while (fgets(line, sizeof(line), f))
                        have += strchr(line, '\n') != NULL;
                fclose(f);
        }
        have += 1024;
        return max > have ? max - have : 0;
}
