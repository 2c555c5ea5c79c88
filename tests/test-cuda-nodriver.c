/*
 * test-cuda-nodriver.c - cubed --backend cuda on a machine without a driver
 * exits with status 4 (which cubed@.service does not restart) and one line
 * that says what is missing. Skipped (77) where a driver is installed.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
        const char *bin = getenv("CUBED_BIN");
        char cmd[1024], line[1024], out[4096] = "";
        size_t lines = 0;
        FILE *p;
        int status;

        if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
                printf("SKIP: a CUDA driver is installed here\n");
                return 77;
        }
        if (!bin)
                return 1;
        snprintf(cmd, sizeof(cmd), "dir=$(mktemp -d /tmp/cube-nodrv-XXXXXX); %s --backend cuda "
                 "--device 0 --socket $dir/s --cache-dir $dir/c 2>&1; rc=$?; rm -rf $dir; "
                 "exit $rc", bin);
        p = popen(cmd, "r");
        if (!p)
                return 1;
        while (fgets(line, sizeof(line), p)) {
                lines++;
                strncat(out, line, sizeof(out) - strlen(out) - 1);
        }
        status = pclose(p);
        printf("cubed said (%zu lines): %s", lines, out);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 4) {
                printf("FAIL: exit status %d, expected 4\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
                return 1;
        }
        if (lines != 1 || !strstr(out, "cuda0") || !strstr(out, "libcuda.so.1")) {
                printf("FAIL: expected one line naming cuda0 and libcuda.so.1\n");
                return 1;
        }
        printf("PASS\n");
        return 0;
}
