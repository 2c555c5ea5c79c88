/*
 * access.c - who may connect, and how many sessions they may hold.
 *
 * The socket's mode and group are the first gate. allow-uids and
 * allow-groups narrow it further: a peer connects only if its uid is listed
 * or it is a member of a listed group (its primary group or a supplementary
 * one). Root and the daemon's own user are always let in, so an operator can
 * always inspect the daemon; they are also exempt from the session quotas.
 *
 * Names in the lists are resolved once, when the configuration loads; at
 * accept the peer's uid and groups come from the kernel (SO_PEERCRED and
 * SO_PEERGROUPS), so nothing on the loop reads /etc/passwd or /proc.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cubed.h"

/* The numeric id a list entry names: a number, or a user or group name.
 * Called when the configuration loads, never on the loop's accept path. */
static bool entry_id(const char *entry, bool group, unsigned long *ret)
{
        char *end;

        errno = 0;
        *ret = strtoul(entry, &end, 10);
        if (!errno && end != entry && *end == '\0')
                return true;
        if (group) {
                struct group *g = getgrnam(entry);
                if (g)
                        *ret = g->gr_gid;
                return g != NULL;
        }
        struct passwd *p = getpwnam(entry);
        if (p)
                *ret = p->pw_uid;
        return p != NULL;
}

int cube__id_list_parse(const char *list, bool group, cube__id_list *ret, char *why, size_t len)
{
        cube__id_list l = {0};
        char *copy, *save = NULL;

        *ret = l;
        if (!list || !*list)
                return 0;
        if (!(copy = strdup(list)))
                return -ENOMEM;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                unsigned long v;
                while (isspace((unsigned char) *tok))
                        tok++;
                for (char *e = tok + strlen(tok); e > tok && isspace((unsigned char) e[-1]); e--)
                        e[-1] = '\0';
                if (!*tok)
                        continue;
                if (!entry_id(tok, group, &v) || v > UINT32_MAX) {
                        snprintf(why, len, "%s: '%s' names no %s", group ? "allow-groups" :
                                 "allow-uids", tok, group ? "group" : "user");
                        free(copy);
                        free(l.ids);
                        return -ENOENT;
                }
                uint32_t *grown = realloc(l.ids, (l.n + 1) * sizeof(*l.ids));
                if (!grown) {
                        free(copy);
                        free(l.ids);
                        return -ENOMEM;
                }
                l.ids = grown;
                l.ids[l.n++] = (uint32_t) v;
        }
        free(copy);
        l.set = true;
        *ret = l;
        return 0;
}

static bool id_listed(const cube__id_list *l, uint32_t id)
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

bool cube__access_refused(cube__server *srv, const struct ucred *cred, const gid_t *groups,
                          size_t n_groups, char *why, size_t len)
{
        const cube__id_list *uids = &srv->opts.allow_uid_ids, *gids = &srv->opts.allow_gid_ids;

        if (!uids->set && !gids->set)
                return false;
        if (cred->uid == 0 || cred->uid == geteuid())
                return false;
        if (id_listed(uids, cred->uid) || id_listed(gids, cred->gid))
                return false;
        for (size_t i = 0; i < n_groups; i++)
                if (id_listed(gids, groups[i]))
                        return false;
        snprintf(why, len, "uid %u may not use this daemon: it is not in allow-uids, nor a member "
                 "of allow-groups", (unsigned) cred->uid);
        return true;
}

void cube__poison_blame(cube__server *srv, const cube__session *s)
{
        uint32_t after = srv->opts.poison_ban_after;
        uint64_t until = uv_hrtime() + (uint64_t) srv->opts.poison_ban_s * 1000000000ull;
        cube__uid *u;

        if (!after)
                return;
        /* Root and the daemon's user are never refused by uid (an operator
         * can always look), but their names are. */
        if (s->uid != 0 && s->uid != geteuid() && (u = cube__uid_get(srv, s->uid)) &&
            ++u->poisons >= after) {
                u->banned_until_ns = until;
                u->poisons = 0;
                cube__log_session(CUBE__LOG_WARNING, s, 0, "uid %u has poisoned the device %u "
                                  "time(s): its sessions are refused for %u s (poison-ban-after)",
                                  (unsigned) s->uid, after, srv->opts.poison_ban_s);
        }
        if (!*s->name)
                return;
        /* Its entry, else an empty one, else the one whose ban ends first. */
        cube__name_ban *slot = NULL, *oldest = NULL;
        for (size_t i = 0; i < CUBE__NAME_BANS && !slot; i++) {
                cube__name_ban *b = &srv->name_bans[i];
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
                cube__log_session(CUBE__LOG_WARNING, s, 0, "sessions named '%s' have poisoned the "
                                  "device %u time(s): the name is refused for %u s "
                                  "(poison-ban-after)", s->name, after, srv->opts.poison_ban_s);
        }
}

bool cube__name_banned(cube__server *srv, const char *name, char *why, size_t len)
{
        uint64_t now = uv_hrtime();

        for (size_t i = 0; *name && i < CUBE__NAME_BANS; i++) {
                const cube__name_ban *b = &srv->name_bans[i];
                if (strcmp(b->name, name) == 0 && b->banned_until_ns > now) {
                        snprintf(why, len, "sessions named '%s' poisoned the device %u time(s): "
                                 "the name is refused for another %llu s", name,
                                 srv->opts.poison_ban_after,
                                 (unsigned long long) ((b->banned_until_ns - now) / 1000000000ull + 1));
                        return true;
                }
        }
        return false;
}

bool cube__session_quota_full(cube__server *srv, uid_t uid, char *why, size_t len)
{
        cube__uid *u = cube__idmap_get(&srv->uids, uid);
        uint64_t now = uv_hrtime();

        if (uid == 0 || uid == geteuid())
                return false;
        if (u && u->banned_until_ns > now) {
                snprintf(why, len, "uid %u poisoned the device %u time(s): it is refused for "
                         "another %llu s (poison-ban-after)", (unsigned) uid,
                         srv->opts.poison_ban_after,
                         (unsigned long long) ((u->banned_until_ns - now) / 1000000000ull + 1));
                return true;
        }
        if (srv->opts.max_sessions && srv->n_sessions >= srv->opts.max_sessions) {
                snprintf(why, len, "the daemon serves its most sessions already (max-sessions, "
                         "%u); try again once one has ended", srv->opts.max_sessions);
                return true;
        }
        if (srv->opts.max_sessions_per_uid && u && u->sessions >= srv->opts.max_sessions_per_uid) {
                snprintf(why, len, "uid %u has %u sessions, the most max-sessions-per-uid allows",
                         (unsigned) uid, u->sessions);
                return true;
        }
        return false;
}

int cube__socket_set_group(const char *path, const char *group)
{
        unsigned long gid;

        if (!entry_id(group, true, &gid)) {
                cube__log(CUBE__LOG_ERR, "socket-group %s names no group", group);
                return -ENOENT;
        }
        /* Never through a symlink: one planted in its place would give a
         * file of the attacker's choosing the group. */
        if (fchownat(AT_FDCWD, path, (uid_t) -1, (gid_t) gid, AT_SYMLINK_NOFOLLOW) < 0) {
                cube__log(CUBE__LOG_ERR, "cannot give %s the group %s: %s", path, group,
                          strerror(errno));
                return -errno;
        }
        return 0;
}
