/*
 * dialect-check.c - the check of every kernel source, whatever its backend,
 * against the rules of the kernel dialect that no compiler enforces.
 *
 * One source runs on every device, so the dialect (docs/KERNELS.md) is the
 * part of C that both OpenCL C and CUDA C++ compile, without a C library. A
 * compiler catches an unknown function; it does not catch an #include of a
 * header it happens to have, an asm statement, or a call into the C library
 * of the machine it runs on. Those are refused here, for every backend,
 * before anything is compiled, naming the line that breaks the rule.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "errors.h"

/* Names no kernel may use: the C library and the system behind it. A device
 * has neither; a kernel that reaches for one is refused, not compiled. */
static const char *const forbidden[] = {
        "asm", "__asm", "__asm__", "extern", "_Thread_local", "__thread", "thread_local",
        "malloc", "calloc", "realloc", "free", "alloca", "printf", "fprintf", "sprintf",
        "snprintf", "puts", "putchar", "fopen", "fclose", "fread", "fwrite", "fputs", "fgets",
        "fflush", "remove", "rename", "open", "openat", "close", "read", "write", "unlink",
        "system", "popen", "fork", "vfork", "execl", "execlp", "execle", "execv", "execvp",
        "execve", "syscall", "exit", "_exit", "abort", "atexit", "signal", "raise", "kill",
        "sleep", "usleep", "nanosleep", "clock_gettime", "time", "gettimeofday", "getenv",
        "setjmp", "longjmp", "dlopen", "dlsym", "mmap", "munmap", "mprotect", "socket",
        "connect", "ptrace", "pthread_create", "memcpy", "memset", "memmove", "strlen",
        "strcpy", "stdin", "stdout", "stderr", "errno",
};

static cube_error *invalid(unsigned line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cube_error *invalid(unsigned line, const char *fmt, ...)
{
        char text[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        return cube__err_text(CUBE_COMPILATION_VALIDATION, "line %u: %s (docs/KERNELS.md, \"The "
                              "dialect\")", line, text);
}

static bool ident_char(int c)
{
        return isalnum(c) || c == '_';
}

cube_error *cube__dialect_check(const char *src)
{
        unsigned line = 1;
        bool line_start = true;

        for (const char *p = src; *p;) {
                if (*p == '\n') {
                        line++;
                        line_start = true;
                        p++;
                        continue;
                }
                if (isspace((unsigned char) *p)) {
                        p++;
                        continue;
                }
                if (p[0] == '/' && p[1] == '/') {
                        while (*p && *p != '\n')
                                p++;
                        continue;
                }
                if (p[0] == '/' && p[1] == '*') {
                        for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++)
                                line += *p == '\n';
                        p += *p ? 2 : 0;
                        continue;
                }
                if (*p == '"' || *p == '\'') {
                        char q = *p++;
                        if (q == '"')
                                return invalid(line, "a string literal: kernels have no strings");
                        while (*p && *p != q && *p != '\n')
                                p += p[0] == '\\' && p[1] ? 2 : 1;
                        p += *p == q;
                        continue;
                }
                if (*p == '#' && line_start) {
                        const char *d = p + 1;
                        while (*d == ' ' || *d == '\t')
                                d++;
                        static const char *const ok[] = {
                                "define", "undef", "if", "ifdef", "ifndef", "elif", "else",
                                "endif",
                        };
                        size_t n = 0;
                        while (ident_char((unsigned char) d[n]))
                                n++;
                        bool allowed = false;
                        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
                                allowed |= strlen(ok[i]) == n && memcmp(ok[i], d, n) == 0;
                        /* OpenCL's fp64 pragma is harmless: every device
                         * has doubles (the front end drops the line). */
                        const char *pragma = "pragma OPENCL EXTENSION cl_khr_fp64";
                        allowed |= strncmp(d, pragma, strlen(pragma)) == 0;
                        if (!allowed)
                                return invalid(line, "#%.*s: a kernel may use only #define, "
                                               "#undef, conditionals and the OpenCL fp64 pragma",
                                               (int) n, d);
                        line_start = false;
                        p = d + n;
                        continue;
                }
                line_start = false;
                if (ident_char((unsigned char) *p) && !isdigit((unsigned char) *p)) {
                        const char *w = p;
                        while (ident_char((unsigned char) *p))
                                p++;
                        size_t n = (size_t) (p - w);
                        for (size_t i = 0; i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
                                if (strlen(forbidden[i]) == n && memcmp(forbidden[i], w, n) == 0)
                                        return invalid(line, "'%s': kernels have no C library, "
                                                       "no system calls and no asm",
                                                       forbidden[i]);
                        continue;
                }
                p++;
        }
        return NULL;
}

