/*
 * cubectl.h - what cubectl's command files share: the exit statuses, the
 * output helpers of cubectl-print.c, and the commands of cubectl-health.c.
 */
#ifndef CUBECTL_H
#define CUBECTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube.h"

enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

/* cubectl-print.c: a JSON string, escaped; a table cell with spaces kept or
 * not; a byte count as a person reads it; an error as text or JSON. */
extern bool json_output;
void print_json_string(const char *s);
const char *cell_text(const char *s, char *buf, size_t cap, bool spaces);
void human_bytes(uint64_t n, char *buf, size_t cap);
void print_error(const char *what, const cube_error *e, const char *text);
int report(const char *what, cube_error *e);

/* cubectl-health.c: the options its commands take (--dir, --interval,
 * --count, as the option letters 'D', 'I', 'C'); answers EXIT_USAGE for a
 * bad value, after saying why. */
int health_option(int opt, const char *arg);
/* list needs no connection: c is NULL, and it scans the sockets' directory. */
int cmd_list(cube_client *c, bool json, const char *arg);
int cmd_selftest(cube_client *c, bool json, const char *arg);
int cmd_top(cube_client *c, bool json, const char *arg);

#endif
