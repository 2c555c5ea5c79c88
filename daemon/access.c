/*
 * access.c - who may connect, and how many sessions they may hold.
 *
 * The socket's mode and group are the first gate. allow-uids and
 * allow-groups narrow it further: a peer connects only if its uid is listed
 * or it is a member of a listed group (its primary group or a supplementary
 * one). Root and the daemon's own user are always let in, so an operator can
 * always inspect the daemon; they are also exempt from the session quotas.
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

/* The numeric id a list entry names: a number, or a user or group name. */
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

/* Whether the comma-separated list names id. */
static bool listed(const char *list, bool group, unsigned long id)
{
        char *copy = strdup(list), *save = NULL;
        bool found = false;

        if (!copy)
                return false;
        for (char *tok = strtok_r(copy, ",", &save); tok && !found; tok = strtok_r(NULL, ",", &save)) {
                unsigned long v;
                while (isspace((unsigned char) *tok))
                        tok++;
                for (char *e = tok + strlen(tok); e > tok && isspace((unsigned char) e[-1]); e--)
                        e[-1] = '\0';
                found = *tok && entry_id(tok, group, &v) && v == id;
        }
        free(copy);
        return found;
}

/* Whether the peer process belongs to a listed group: its primary group, or
 * one of the supplementary groups its kernel credentials carry. */
static bool in_listed_group(const char *list, const struct ucred *cred)
{
        char path[64], line[4096];
        FILE *f;
        bool found = listed(list, true, cred->gid);

        snprintf(path, sizeof(path), "/proc/%d/status", (int) cred->pid);
        if (found || !(f = fopen(path, "re")))
                return found;
        while (!found && fgets(line, sizeof(line), f)) {
                if (strncmp(line, "Groups:", 7) != 0)
                        continue;
                char *p = line + 7, *end;
                for (;;) {
                        unsigned long g = strtoul(p, &end, 10);
                        if (end == p)
                                break;
                        if (listed(list, true, g)) {
                                found = true;
                                break;
                        }
                        p = end;
                }
        }
        fclose(f);
        return found;
}

bool cube__uid_is_admin(uid_t uid)
{
        return uid == 0 || uid == geteuid();
}

bool cube__access_refused(cube__server *srv, const struct ucred *cred, char *why, size_t len)
{
        const char *uids = srv->opts.allow_uids, *groups = srv->opts.allow_groups;

        if ((!uids || !*uids) && (!groups || !*groups))
                return false;
        if (cred->uid == 0 || cred->uid == geteuid())
                return false;
        if (uids && *uids && listed(uids, false, cred->uid))
                return false;
        if (groups && *groups && in_listed_group(groups, cred))
                return false;
        snprintf(why, len, "uid %u may not use this daemon: it is not in allow-uids, nor a member "
                 "of allow-groups", (unsigned) cred->uid);
        return true;
}

bool cube__session_quota_full(cube__server *srv, uid_t uid, char *why, size_t len)
{
        cube__uid *u = cube__idmap_get(&srv->uids, uid);

        if (uid == 0 || uid == geteuid())
                return false;
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
