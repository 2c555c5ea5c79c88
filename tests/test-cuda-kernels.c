/*
 * test-cuda-kernels.c - every kernel of examples/, tests/ and tools/ through
 * NVRTC to an sm_90 CUBIN, and the resources read from each CUBIN against
 * ptxas -v on the same kernel's PTX. NVRTC runs on the CPU, so this needs
 * no GPU; without NVRTC it is skipped (77).
 *
 * Kernels are gathered from the C files' string literals (harness.c), so a
 * kernel added to a test or example is checked here without being listed.
 * A kernel that includes a C library header beyond the ones the prelude
 * stands in for is skipped, with its reason printed.
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "harness.h"
#include "frontend.h"
#include "internal.h"

static const cube__nvrtc_api *nv;
static test_kernel_source *kernels;
static size_t n_kernels;

/* Kernels that exist to fail to compile (their test says so: an 8 MiB
 * constant table is past what a GPU holds too), and the tail of the
 * compiler bomb, whose macros the test writes at run time. */
static const char *const broken[] = { "undeclared_cube_thing", "no_such_identifier",
                                        "B40", "values[2 << 20]", NULL };

static bool deliberately_broken(const test_kernel_source *k)
{
        for (const char *const *b = broken; *b; b++)
                if (strstr(k->source, *b))
                        return true;
        return false;
}

static bool is_template(const char *src)
{
        for (const char *p = strchr(src, '%'); p; p = strchr(p + 1, '%')) {
                const char *q = p + 1;
                while (*q == 'z' || *q == 'l' || *q == 'h' || (*q >= '0' && *q <= '9'))
                        q++;
                if (*q && strchr("udisxX", *q))
                        return true;
        }
        return false;
}

static void gather(const char *dir, const char *prefix)
{
        DIR *dp = opendir(dir);
        struct dirent *de;
        char path[1024];

        ck_assert_ptr_nonnull(dp);
        while ((de = readdir(dp))) {
                size_t l = strlen(de->d_name);
                if (l < 3 || strcmp(de->d_name + l - 2, ".c") != 0 ||
                    (prefix && strncmp(de->d_name, prefix, strlen(prefix)) != 0) ||
                    strncmp(de->d_name, "test-cuda", 9) == 0)   /* this file's own probes */
                        continue;
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                ck_assert_int_eq(test_kernel_sources(path, &kernels, &n_kernels), 0);
        }
        closedir(dp);
}

/* ptxas -v on PTX: registers, static shared bytes and stack frame of entry. */
static bool ptxas_resources(const char *ptx, size_t len, const char *entry,
                            cube__cuda_resources *ret)
{
        char dir[] = "/tmp/cube-ptxas-XXXXXX", in[128], cmd[512], line[512];
        bool in_entry = false, got = false;
        FILE *f, *p;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(in, sizeof(in), "%s/k.ptx", dir);
        f = fopen(in, "w");
        ck_assert_ptr_nonnull(f);
        fwrite(ptx, 1, strlen(ptx) < len ? strlen(ptx) : len, f);
        fclose(f);
        snprintf(cmd, sizeof(cmd), "%s -arch=sm_90 -v -o %s/k.cubin %s 2>&1", PTXAS, dir, in);
        p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        memset(ret, 0, sizeof(*ret));
        while (fgets(line, sizeof(line), p)) {
                char name[128];
                unsigned a, b;
                const char *q;
                if (sscanf(line, "ptxas info : Compiling entry function '%127[^']'", name) == 1 ||
                    sscanf(line, "ptxas info    : Compiling entry function '%127[^']'", name) == 1)
                        in_entry = strcmp(name, entry) == 0;
                if (!in_entry)
                        continue;
                if ((q = strstr(line, "bytes stack frame")) && sscanf(line, "%*[^0-9]%u", &a) == 1)
                        ret->local_bytes = a;
                if ((q = strstr(line, "Used ")) && sscanf(q, "Used %u registers", &a) == 1) {
                        ret->registers = a;
                        got = true;
                        const char *s = strstr(line, "bytes smem");
                        if (s) {
                                while (s > line && s[-1] == ' ')
                                        s--;
                                while (s > line && s[-1] >= '0' && s[-1] <= '9')
                                        s--;
                                if (sscanf(s, "%u", &b) == 1)
                                        ret->shared_bytes = b;
                        }
                }
        }
        pclose(p);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        ck_assert_int_eq(system(cmd), 0);
        return got;
}

START_TEST(every_kernel_compiles_and_matches_ptxas)
{
        size_t ok = 0, skipped = 0;
        bool have_ptxas = access(PTXAS, X_OK) == 0;

        gather(SOURCE_ROOT "/examples", NULL);
        gather(SOURCE_ROOT "/tests", "test-");
        gather(SOURCE_ROOT "/tools", "cube-bench");
        ck_assert_int_gt(n_kernels, 20);
        if (!have_ptxas)
                printf("SKIP ptxas comparison: no %s\n", PTXAS);
        for (size_t i = 0; i < n_kernels; i++) {
                const test_kernel_source *k = &kernels[i];
                cube__kernel_desc desc = { .source = k->source, .entry = k->entry };
                char *cubin = NULL, *ptx = NULL;
                size_t cubin_len = 0, ptx_len = 0;
                cube__cuda_resources elf, ref;
                cube_error *e;

                if (is_template(k->source)) {
                        printf("SKIP %s: %s: a printf template the test fills in at run time\n",
                               k->file, k->entry);
                        skipped++;
                        continue;
                }
                /* The core refuses these before any backend sees them. */
                if ((e = cube__dialect_check(k->source))) {
                        ck_assert_int_eq(cube_error_kind_of(e), CUBE_COMPILATION_VALIDATION);
                        ck_assert(cube_error_is_refusal(e));
                        printf("REFUSED %s: %s: %s\n", k->file, k->entry, cube_error_message(e));
                        cube_error_free(e);
                        continue;
                }
                /* The front end's checked form is what the daemon compiles. */
                char *checked = NULL, *facts = NULL, *why = NULL, *source = NULL;
                cube__fe_status st = cube__frontend_run(k->source, k->entry, &checked, &facts,
                                                        &why);
                if (st == CUBE__FE_REFUSED || st == CUBE__FE_DOES_NOT_PARSE) {
                        printf("REFUSED %s: %s by the front end: %s\n", k->file, k->entry, why);
                        free(why);
                        continue;
                }
                ck_assert_msg(st == CUBE__FE_OK, "%s: %s: %s", k->file, k->entry, why);
                ck_assert_int_ge(asprintf(&source, "#define CUBE__CHECKED 1\n%s", checked), 0);
                free(checked);
                free(facts);
                desc.source = source;
                e = cube__cuda_compile(nv, &desc, 90, false, &cubin, &cubin_len);
                if (deliberately_broken(k)) {
                        ck_assert_msg(e != NULL, "%s: %s compiled, but it is meant not to",
                                      k->file, k->entry);
                        ck_assert_int_eq(cube_error_kind_of(e), CUBE_COMPILATION_GENERIC);
                        ck_assert(cube_error_is_refusal(e));
                        printf("REFUSED %s: %s (deliberately broken)\n", k->file, k->entry);
                        cube_error_free(e);
                        free(source);
                        continue;
                }
                ck_assert_msg(e == NULL, "%s: %s: %s", k->file, k->entry,
                              e ? cube_error_message(e) : "");
                ck_assert_int_eq(cube__cuda_cubin_resources(cubin, cubin_len, k->entry, &elf), 0);
                if (have_ptxas) {
                        e = cube__cuda_compile(nv, &desc, 90, true, &ptx, &ptx_len);
                        ck_assert_ptr_null(e);
                        ck_assert_msg(ptxas_resources(ptx, ptx_len, k->entry, &ref),
                                      "ptxas said nothing of %s", k->entry);
                        ck_assert_msg(elf.registers == ref.registers &&
                                      elf.shared_bytes == ref.shared_bytes &&
                                      elf.local_bytes == ref.local_bytes,
                                      "%s: %s: CUBIN %u regs %u smem %u stack; ptxas %u %u %u",
                                      k->file, k->entry, elf.registers, elf.shared_bytes,
                                      elf.local_bytes, ref.registers, ref.shared_bytes,
                                      ref.local_bytes);
                }
                printf("OK %s: %s: %u registers, %u B shared, %u B stack, %u B params\n",
                       k->file, k->entry, elf.registers, elf.shared_bytes, elf.local_bytes,
                       elf.param_bytes);
                ck_assert_int_gt(elf.registers, 0);
                free(cubin);
                free(ptx);
                free(source);
                ok++;
        }
        printf("%zu kernels compiled to sm_90, %zu skipped\n", ok, skipped);
        ck_assert_int_ge(ok, 20);
}
END_TEST

/* A kernel whose per-unit frame would make an H100 reserve GiBs is refused;
 * a modest one is not. H100: 132 SMs x 2048 resident units, 80 GiB. */
START_TEST(a_big_stack_is_refused)
{
        static const char big[] =
                "KERNEL void deep(uint32_t *out, INFO)\n"
                "{\n        volatile uint32_t a[4096];\n"
                "        for (uint32_t i = 0; i < 4096; i++) a[i] = i * UNIT_POS_X;\n"
                "        out[ABSOLUTE_POS] = a[SCALAR(uint32_t, 0, 0) % 4096];\n}\n";
        static const char small[] =
                "KERNEL void shallow(uint32_t *out, INFO)\n"
                "{\n        out[ABSOLUTE_POS] = SCALAR(uint32_t, 0, 0);\n}\n";
        cube__kernel_desc db = { .source = big, .entry = "deep", .n_buffers = 1 };
        cube__kernel_desc ds = { .source = small, .entry = "shallow", .n_buffers = 1 };
        cube__cuda_resources rb, rs;
        char *cubin;
        size_t len;
        cube_error *e;

        ck_assert_ptr_null(cube__cuda_compile(nv, &db, 90, false, &cubin, &len));
        ck_assert_int_eq(cube__cuda_cubin_resources(cubin, len, "deep", &rb), 0);
        free(cubin);
        ck_assert_uint_ge(rb.local_bytes, 16384);
        e = cube__cuda_check_stack(&rb, "deep", 132ull * 2048, 80ull << 30);
        ck_assert_ptr_nonnull(e);
        ck_assert(cube_error_is_refusal(e));
        ck_assert_ptr_nonnull(strstr(cube_error_message(e), "stack"));
        cube_error_free(e);

        ck_assert_ptr_null(cube__cuda_compile(nv, &ds, 90, false, &cubin, &len));
        ck_assert_int_eq(cube__cuda_cubin_resources(cubin, len, "shallow", &rs), 0);
        free(cubin);
        ck_assert_ptr_null(cube__cuda_check_stack(&rs, "shallow", 132ull * 2048, 80ull << 30));
}
END_TEST

/* A source error comes back with NVRTC's log, as a refusal. */
START_TEST(a_source_error_is_a_refusal_with_the_log)
{
        cube__kernel_desc d = { .source = "KERNEL void bad(float *o, INFO) { o[0] = nope; }\n",
                                .entry = "bad", .n_buffers = 1 };
        char *cubin = NULL;
        size_t len;
        cube_error *e = cube__cuda_compile(nv, &d, 90, false, &cubin, &len);

        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_COMPILATION_GENERIC);
        ck_assert_ptr_nonnull(strstr(cube_error_message(e), "bad.c(1)"));
        ck_assert_ptr_nonnull(strstr(cube_error_message(e), "nope"));
        cube_error_free(e);
}
END_TEST

int main(void)
{
        const char *why;
        Suite *s = suite_create("cuda-kernels");
        TCase *tc = tcase_create("nvrtc");
        SRunner *sr;
        int failed;

        if (cube__cuda_load_nvrtc(&nv, &why) < 0) {
                printf("SKIP: %s\n", why);
                return 77;
        }
        printf("NVRTC %d.%d, prelude %.16s\n", nv->major, nv->minor, cube__cuda_prelude_digest);
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, every_kernel_compiles_and_matches_ptxas);
        tcase_add_test(tc, a_big_stack_is_refused);
        tcase_add_test(tc, a_source_error_is_a_refusal_with_the_log);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_set_fork_status(sr, CK_NOFORK);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}
