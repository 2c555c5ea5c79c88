/*
 * fuzz-frontend.c - a tenant's kernel source through the kernel front end
 * (backends/frontend/), and the front end's facts through the parser cubed
 * reads them with.
 *
 * An input is the entry point's name, a newline, then the source. Whatever
 * the source, the front end accepts it (a checked source that starts with
 * the guards, and facts that cubed's parser takes), refuses it naming a
 * line and a column of the entry's file, or says it is not C; it never
 * crashes, leaks, or answers nothing. The facts parser, fed the raw input
 * as if a compromised build process had written it, takes it or refuses it
 * and never crashes; bounds it takes (bounds.c) are evaluated over a grid
 * whose words come from the input, without a sanitizer's report.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Evaluates f's bounds, if any, over two grids, with the input's first
 * bytes as the launch's words. */
static void evaluate(const cube__fe_facts *f, const uint8_t *data, size_t size)
{
        uint64_t words[8] = { 0 }, bindings[4] = { 64, 1ull << 40, 0, CUBE__CHECK_READ_ONLY | 8 };
        cube__fe_grid g = { .count = { 4, 2, 1 }, .dim = { 64, 1, 1 }, .info = words, .n_info = 8,
                            .meta = 4, .dyn = 6, .bindings = bindings, .n_bindings = 4 };

        if (!f || !f->bounds)
                return;
        memcpy(words, data, size < sizeof(words) ? size : sizeof(words));
        (void) cube__fe_bounds_hold(f->bounds, &g);
        g.count[0] = g.count[1] = g.count[2] = 65536;
        g.dim[2] = 1024;
        words[0] = ~0ull;
        (void) cube__fe_bounds_hold(f->bounds, &g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *nl = memchr(data, '\n', size);
        char *entry, *source, *checked = NULL, *facts = NULL, *why = NULL;

        if (!nl || memchr(data, '\0', size) || size > 64 * 1024)
                return 0;
        entry = strndup((const char *) data, (size_t) (nl - (const char *) data));
        source = strndup(nl + 1, size - (size_t) (nl + 1 - (const char *) data));
        if (!entry || !source)
                abort();

        cube__fe_facts *raw = cube__fe_facts_parse(source, NULL);
        evaluate(raw, data, size);
        cube__fe_facts_free(raw);
        cube__fe_facts_free(cube__fe_facts_parse(source, "k"));
        if (strlen(entry) > 0 && strlen(entry) <= 63 && !strchr(entry, '/')) {
                switch (cube__frontend_run(source, entry, &checked, &facts, &why)) {
                case CUBE__FE_OK: {
                        cube__fe_facts *f = cube__fe_facts_parse(facts, entry);
                        if (!checked || !f || why || !strstr(checked, "#define CUBE__NB"))
                                abort();
                        evaluate(f, data, size);
                        cube__fe_facts_free(f);
                        break;
                }
                case CUBE__FE_REFUSED:
                        if (!why || checked || facts || !strstr(why, entry))
                                abort();
                        break;
                case CUBE__FE_DOES_NOT_PARSE:
                        if (!why || checked || facts)
                                abort();
                        break;
                default:
                        if (!why)
                                abort();
                        break;
                }
        }
        free(checked);
        free(facts);
        free(why);
        free(entry);
        free(source);
        return 0;
}
