/*
 * facts.c - the front end's facts about an entry point, as text and back.
 *
 * The front end runs in the build process and cubed reads what it learnt,
 * so the facts cross a process boundary as a few lines of text (one fact a
 * line: "entry", then its "buffer", "buffertype", "tensormap", "scalar" and
 * "bounds" (bounds.c) lines, for each entry point; then "sync" and "site"
 * for the whole source),
 * read here by a parser that trusts nothing in them: the build process ran
 * a tenant's source.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

void cube__fe_facts_free(cube__fe_facts *f)
{
        if (!f)
                return;
        free(f->buffers);
        free(f->scalars);
        for (uint32_t i = 0; i < f->n_sites; i++)
                free(f->sites[i]);
        free(f->sites);
        cube__fe_bounds_free(f->bounds);
        free(f);
}

static bool grow(void **p, uint32_t n, size_t size)
{
        void *g = realloc(*p, (size_t) (n + 1) * size);
        if (!g)
                return false;
        *p = g;
        return true;
}

cube__fe_facts *cube__fe_facts_parse(const char *text, const char *entry)
{
        cube__fe_facts *f = calloc(1, sizeof(*f));
        const char *line = text;
        /* Whether the lines read now are the asked entry's, and whether its
         * section was seen at all. */
        bool ours = false, found = false;

        if (!f)
                return NULL;
        while (line && *line) {
                const char *eol = strchr(line, '\n');
                size_t len = eol ? (size_t) (eol - line) : strlen(line);
                char buf[512];
                /* Longer than a line of the others: read in place. One
                 * that cannot be read leaves the entry without a bare form. */
                if (strncmp(line, "bounds ", 7) == 0) {
                        if (ours && !f->bounds)
                                f->bounds = cube__fe_bounds_parse(line + 7, len - 7);
                        line = eol ? eol + 1 : NULL;
                        continue;
                }
                if (len >= sizeof(buf))
                        len = sizeof(buf) - 1;
                memcpy(buf, line, len);
                buf[len] = '\0';
                line = eol ? eol + 1 : NULL;

                unsigned k, io;
                long long size;
                char cst[8], name[64];
                int g, at = 0;
                if (strncmp(buf, "entry ", 6) == 0) {
                        ours = !found && (!entry || strcmp(buf + 6, entry) == 0);
                        found |= ours;
                        continue;
                }
                if (!ours && (strncmp(buf, "buffer", 6) == 0 || strncmp(buf, "scalar ", 7) == 0 ||
                              strncmp(buf, "tensormap ", 10) == 0))
                        continue;
                if (sscanf(buf, "buffer %u %u %7s %lld %63s", &k, &io, cst, &size, name) == 5) {
                        if (k != f->n_buffers || k >= CUBE__FE_MAX_PARAMS || io < 1 || io > 3 ||
                            size <= 0 || size > 8 ||
                            !grow((void **) &f->buffers, f->n_buffers, sizeof(*f->buffers)))
                                goto bad;
                        cube__fe_buffer *b = &f->buffers[f->n_buffers++];
                        memset(b, 0, sizeof(*b));
                        snprintf(b->name, sizeof(b->name), "%s", name);
                        b->io = (cube__param_io) io;
                        b->is_const = strcmp(cst, "const") == 0;
                        b->elem_bytes = (uint32_t) size;
                } else if (sscanf(buf, "buffertype %u %n", &k, &at) == 1 && at > 0) {
                        if (k >= f->n_buffers)
                                goto bad;
                        snprintf(f->buffers[k].type, sizeof(f->buffers[k].type), "%s", buf + at);
                } else if (sscanf(buf, "tensormap %u", &k) == 1) {
                        if (k >= f->n_buffers)
                                goto bad;
                        f->buffers[k].tensor_map = true;
                } else if (strncmp(buf, "scalar ", 7) == 0) {
                        char type[32];
                        if (sscanf(buf, "scalar %d %31s %63s", &g, type, name) != 3 || g < 0 ||
                            g >= CUBE__SCALAR_GROUPS || f->n_scalars >= CUBE__FE_MAX_PARAMS ||
                            !grow((void **) &f->scalars, f->n_scalars, sizeof(*f->scalars)))
                                goto bad;
                        cube__fe_scalar *s = &f->scalars[f->n_scalars++];
                        snprintf(s->name, sizeof(s->name), "%s", name);
                        snprintf(s->type, sizeof(s->type), "%s", type);
                        s->group = (cube__scalar_group) g;
                        f->group_counts[g]++;
                } else if (sscanf(buf, "sync %d", &g) == 1) {
                        f->uses_sync = g != 0;
                } else if (strncmp(buf, "site ", 5) == 0) {
                        if (f->n_sites >= CUBE__FE_MAX_SITES ||
                            !grow((void **) &f->sites, f->n_sites, sizeof(*f->sites)) ||
                            !(f->sites[f->n_sites] = strdup(buf + 5)))
                                goto bad;
                        f->n_sites++;
                } else if (buf[0]) {
                        goto bad;
                }
        }
        if (!found)
                goto bad;
        return f;
bad:
        cube__fe_facts_free(f);
        return NULL;
}

void cube__fe_describe_oob(const cube__fe_facts *f, const char *kernel,
                           const cube__oob_record *r, char *buf, size_t cap)
{
        uint64_t site = r->site_plus_one - 1;
        char where[320] = "an access";
        unsigned line, col;
        int at = 0;
        bool write = r->flags & 1;

        if (f && site < f->n_sites &&
            sscanf(f->sites[site], "%u:%u %n", &line, &col, &at) == 2 && at > 0)
                snprintf(where, sizeof(where), "%s at %s.c:%u:%u", f->sites[site] + at, kernel,
                         line, col);

        /* A looped cube keeps 32 bits of an index (frontend.c's CUBE__IDX_MAX). */
        const char *further = r->flags & 2 ? " or further out" : "";
        if (r->length)
                snprintf(buf, cap, "kernel '%s' %s out of bounds through %s: index %" PRIu64
                         "%s of %" PRIu64 " elements; the %s, and the launch failed", kernel,
                         write ? "wrote" : "read", where, r->index, further, r->length,
                         write ? "write was dropped" : "read yielded zero");
        else
                snprintf(buf, cap, "kernel '%s' %s out of bounds through %s: element %" PRId64
                         "%s from the pointer lies in none of the launch's %sbindings; the %s, "
                         "and the launch failed", kernel, write ? "wrote" : "read", where,
                         (int64_t) r->index, further, write ? "writable " : "",
                         write ? "write was dropped" : "read yielded zero");
}
