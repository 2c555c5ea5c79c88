/*
 * fuzz-dialect.c - a tenant's kernel source through the readers cubed runs
 * on it itself: the dialect's rules (cube__dialect_check) and the CPU
 * device's assembly of what PoCL compiles (cube__cpu_translate). The front
 * end has its own target (fuzz-frontend.c).
 *
 * An input is the entry point's name, a newline, then the source. A source
 * with a NUL byte never reaches either (cubed refuses it first), nor an
 * entry that is not a C identifier of at most 63 characters. A refusal is a
 * CompilationError::Validation whose text names a line of the source; a
 * translation starts with the prelude.
 */

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "errors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool valid_entry(const char *entry, size_t len)
{
        if (len == 0 || len > 63 || isdigit((unsigned char) entry[0]))
                return false;
        for (size_t i = 0; i < len; i++)
                if (!isalnum((unsigned char) entry[i]) && entry[i] != '_')
                        return false;
        return true;
}

/* A refusal that names a line names one the source has; the rules' always
 * name one. */
static void check_refusal(const cube_error *e, const char *source, bool names_line)
{
        const char *reason = cube_error_reason(e);
        unsigned long line, lines = 1;

        if (!cube_error_message(e))
                abort();
        if (!reason || strncmp(reason, "line ", 5) != 0) {
                if (names_line)
                        abort();
                return;
        }
        for (const char *p = source; *p; p++)
                lines += *p == '\n';
        line = strtoul(reason + 5, NULL, 10);
        if (line == 0 || line > lines)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *nl = memchr(data, '\n', size);
        cube__kernel_desc desc = { 0 };
        char *entry, *source, *translated = NULL;
        cube_error *rules, *e;

        if (!nl || memchr(data, '\0', size))
                return 0;
        entry = strndup((const char *) data, (size_t) (nl - (const char *) data));
        source = strndup(nl + 1, size - (size_t) (nl + 1 - (const char *) data));
        if (!entry || !source)
                abort();

        rules = cube__dialect_check(source);
        if (rules) {
                if (cube_error_kind_of(rules) != CUBE_COMPILATION_VALIDATION)
                        abort();
                check_refusal(rules, source, true);
        }

        if (valid_entry(entry, strlen(entry))) {
                desc.source = source;
                desc.entry = entry;
                e = cube__cpu_translate(&desc, &translated);
                if (e) {
                        if (cube_error_kind_of(e) != CUBE_COMPILATION_VALIDATION &&
                            cube_error_kind_of(e) != CUBE_SERVER_LAUNCH)
                                abort();
                        check_refusal(e, source, false);
                        cube_error_free(e);
                } else if (!translated ||
                           strncmp(translated, cube__cpu_prelude, strlen(cube__cpu_prelude)) != 0) {
                        abort();
                }
                free(translated);
        }

        cube_error_free(rules);
        free(entry);
        free(source);
        return 0;
}
