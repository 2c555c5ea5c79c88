/*
 * cubectl-print.c - cubectl's output: JSON strings, table cells, byte
 * counts and errors, as every command prints them.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cubectl.h"

/* The length of the valid UTF-8 sequence at s, or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s)
{
        size_t n;
        uint32_t cp;

        if (s[0] < 0x80)
                return 1;
        if ((s[0] & 0xe0) == 0xc0)
                n = 2, cp = s[0] & 0x1f;
        else if ((s[0] & 0xf0) == 0xe0)
                n = 3, cp = s[0] & 0x0f;
        else if ((s[0] & 0xf8) == 0xf0)
                n = 4, cp = s[0] & 0x07;
        else
                return 0;
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return n;
}

/* A JSON string: control characters escaped, bytes that are not UTF-8 as
 * U+FFFD, so that whatever a daemon or a client named, the output parses. */
void print_json_string(const char *s)
{
        putchar('"');
        while (*s) {
                unsigned char ch = (unsigned char) *s;
                size_t n = utf8_len((const unsigned char *) s);
                if (ch == '"' || ch == '\\')
                        printf("\\%c", ch);
                else if (ch < 0x20 || ch == 0x7f)
                        printf("\\u%04x", ch);
                else if (n == 0)
                        fputs("\\ufffd", stdout);
                else
                        fwrite(s, 1, n, stdout);
                s += n ? n : 1;
        }
        putchar('"');
}

/* A text for a table cell: control characters and bytes that are not UTF-8
 * as \xNN, so that a name cannot forge rows or columns. */
const char *cell_text(const char *s, char *buf, size_t cap, bool spaces)
{
        size_t o = 0;

        while (*s && o + 5 < cap) {
                unsigned char ch = (unsigned char) *s;
                size_t n = utf8_len((const unsigned char *) s);
                if (ch < 0x20 || ch == 0x7f || (ch == ' ' && !spaces) || n == 0) {
                        o += (size_t) snprintf(buf + o, cap - o, "\\x%02x", ch);
                        s++;
                        continue;
                }
                if (o + n >= cap)
                        break;
                memcpy(buf + o, s, n);
                o += n;
                s += n;
        }
        buf[o] = '\0';
        return buf;
}

void human_bytes(uint64_t n, char *buf, size_t cap)
{
        static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
        double v = (double) n;
        int u = 0;

        while (v >= 1024 && u < 4) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(buf, cap, "%" PRIu64 " B", n);
        else
                snprintf(buf, cap, "%.1f %s", v, units[u]);
}

bool json_output;                       /* --json: errors are JSON too */

/* An error, as text on stderr, or with --json as one JSON object on stdout
 * ({"error": {"command", "variant", "message"}}) so that scripts parse it. */
void print_error(const char *what, const cube_error *e, const char *text)
{
        if (!json_output) {
                fprintf(stderr, "cubectl: %s failed: %s\n", what, text);
                return;
        }
        printf("{\"error\":{\"command\":");
        print_json_string(what);
        printf(",\"variant\":");
        print_json_string(e ? cube_error_variant(e) : "");
        printf(",\"message\":");
        print_json_string(text);
        printf("}}\n");
}

int report(const char *what, cube_error *e)
{
        print_error(what, e, cube_error_message(e));
        cube_error_free(e);
        return EXIT_ERROR;
}
