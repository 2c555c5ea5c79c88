/*
 * idmap.c - an open-addressing hash map from u64 ids to pointers.
 *
 * Sessions, memory ids, streams and failure records are all named by u64 ids
 * that a client may choose, so the map must stay fast with any key pattern:
 * keys are mixed before probing.
 */
#include <errno.h>
#include <stdlib.h>

#include "services.h"

enum { SLOT_EMPTY, SLOT_FULL, SLOT_TOMB };

struct cube__idmap_slot {
        uint64_t key;
        void *value;
        int state;
};

static uint64_t mix(uint64_t k)
{
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdull;
        k ^= k >> 33;
        k *= 0xc4ceb9fe1a85ec53ull;
        k ^= k >> 33;
        return k;
}

static struct cube__idmap_slot *find(const cube__idmap *m, uint64_t key)
{
        if (!m->cap)
                return NULL;
        for (size_t i = mix(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
                struct cube__idmap_slot *s = &m->slots[i];
                if (s->state == SLOT_EMPTY)
                        return NULL;
                if (s->state == SLOT_FULL && s->key == key)
                        return s;
        }
}

void *cube__idmap_get(const cube__idmap *m, uint64_t key)
{
        struct cube__idmap_slot *s = find(m, key);
        return s ? s->value : NULL;
}

static int rehash(cube__idmap *m, size_t cap)
{
        struct cube__idmap_slot *old = m->slots;
        size_t old_cap = m->cap;

        m->slots = calloc(cap, sizeof(*m->slots));
        if (!m->slots) {
                m->slots = old;
                return -ENOMEM;
        }
        m->cap = cap;
        m->len = m->used = 0;
        for (size_t i = 0; i < old_cap; i++)
                if (old[i].state == SLOT_FULL)
                        cube__idmap_put(m, old[i].key, old[i].value);
        free(old);
        return 0;
}

int cube__idmap_put(cube__idmap *m, uint64_t key, void *value)
{
        struct cube__idmap_slot *s = find(m, key);

        if (s) {
                s->value = value;
                return 0;
        }
        if ((m->used + 1) * 10 >= m->cap * 7) {
                size_t cap = m->cap ? m->cap : 16;
                while ((m->len + 1) * 10 >= cap * 5)
                        cap *= 2;
                if (rehash(m, cap) < 0)
                        return -ENOMEM;
        }
        for (size_t i = mix(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
                s = &m->slots[i];
                if (s->state != SLOT_FULL) {
                        if (s->state == SLOT_EMPTY)
                                m->used++;
                        s->key = key;
                        s->value = value;
                        s->state = SLOT_FULL;
                        m->len++;
                        return 0;
                }
        }
}

void *cube__idmap_remove(cube__idmap *m, uint64_t key)
{
        struct cube__idmap_slot *s = find(m, key);
        void *value;

        if (!s)
                return NULL;
        value = s->value;
        s->state = SLOT_TOMB;
        s->value = NULL;
        m->len--;
        return value;
}

void cube__idmap_foreach(const cube__idmap *m, void (*fn)(uint64_t key, void *value, void *ctx),
                         void *ctx)
{
        for (size_t i = 0; i < m->cap; i++)
                if (m->slots[i].state == SLOT_FULL)
                        fn(m->slots[i].key, m->slots[i].value, ctx);
}

void cube__idmap_free(cube__idmap *m)
{
        free(m->slots);
        *m = (cube__idmap) {0};
}
