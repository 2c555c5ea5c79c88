/*
 * test-cuda-errors.c - the CUresult table, entry by entry, and what each
 * class becomes in the taxonomy. Needs no GPU and no driver.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "internal.h"

/* Codes whose class the table must give, written out independently of it. */
static const struct { int code; cube__cu_class cls; } expected[] = {
        { CUDA_SUCCESS, CUBE__CU_OK },
        { CUDA_ERROR_NOT_READY, CUBE__CU_NOT_READY },
        { CUDA_ERROR_ILLEGAL_ADDRESS, CUBE__CU_POISON },
        { CUDA_ERROR_LAUNCH_TIMEOUT, CUBE__CU_POISON },
        { CUDA_ERROR_ASSERT, CUBE__CU_POISON },
        { CUDA_ERROR_HARDWARE_STACK_ERROR, CUBE__CU_POISON },
        { CUDA_ERROR_ILLEGAL_INSTRUCTION, CUBE__CU_POISON },
        { CUDA_ERROR_MISALIGNED_ADDRESS, CUBE__CU_POISON },
        { CUDA_ERROR_INVALID_ADDRESS_SPACE, CUBE__CU_POISON },
        { CUDA_ERROR_INVALID_PC, CUBE__CU_POISON },
        { CUDA_ERROR_LAUNCH_FAILED, CUBE__CU_POISON },
        { CUDA_ERROR_TENSOR_MEMORY_LEAK, CUBE__CU_POISON },
        { CUDA_ERROR_CONTAINED, CUBE__CU_POISON },
        { CUDA_ERROR_MPS_CLIENT_TERMINATED, CUBE__CU_POISON },
        { CUDA_ERROR_EXTERNAL_DEVICE, CUBE__CU_POISON },
        { CUDA_ERROR_ECC_UNCORRECTABLE, CUBE__CU_POISON },
        { CUDA_ERROR_NVLINK_UNCORRECTABLE, CUBE__CU_POISON },
        { CUDA_ERROR_UNKNOWN, CUBE__CU_POISON },
        { CUDA_ERROR_CONTEXT_IS_DESTROYED, CUBE__CU_POISON },
        { CUDA_ERROR_DEINITIALIZED, CUBE__CU_POISON },
        { CUDA_ERROR_OUT_OF_MEMORY, CUBE__CU_OUT_OF_MEMORY },
        { CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, CUBE__CU_RESOURCES },
        { CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, CUBE__CU_RESOURCES },
        { CUDA_ERROR_INVALID_CLUSTER_SIZE, CUBE__CU_RESOURCES },
        { CUDA_ERROR_INVALID_IMAGE, CUBE__CU_COMPILE },
        { CUDA_ERROR_NO_BINARY_FOR_GPU, CUBE__CU_COMPILE },
        { CUDA_ERROR_INVALID_PTX, CUBE__CU_COMPILE },
        { CUDA_ERROR_UNSUPPORTED_PTX_VERSION, CUBE__CU_COMPILE },
        { CUDA_ERROR_INVALID_SOURCE, CUBE__CU_COMPILE },
        { CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, CUBE__CU_COMPILE },
        { CUDA_ERROR_STUB_LIBRARY, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_NO_DEVICE, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_INVALID_DEVICE, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_DEVICE_NOT_LICENSED, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_DEVICE_UNAVAILABLE, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_SYSTEM_NOT_READY, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_MPS_CONNECTION_FAILED, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_MPS_SERVER_NOT_READY, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, CUBE__CU_NO_DEVICE },
        { CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, CUBE__CU_NO_DEVICE },
};

static cube__cu_class expected_class(int code)
{
        for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++)
                if (expected[i].code == code)
                        return expected[i].cls;
        return CUBE__CU_DEFECT;         /* every code not listed above */
}

/* Every CUDA_ERROR_* that cuda.h defines is in the table, with its value. */
START_TEST(every_cuda_h_code_is_in_the_table)
{
        FILE *f = fopen(CUDA_H, "r");
        char line[512], name[128];
        int code, seen = 0;
        size_t n;
        const cube__cu_entry *t = cube__cuda_results(&n);

        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof(line), f)) {
                if (sscanf(line, " %127[A-Z0-9_] = %d", name, &code) != 2 ||
                    (strncmp(name, "CUDA_ERROR_", 11) != 0 && strcmp(name, "CUDA_SUCCESS") != 0))
                        continue;
                bool found = false;
                for (size_t i = 0; i < n; i++)
                        if (strcmp(t[i].name, name) == 0) {
                                ck_assert_int_eq(t[i].code, code);
                                found = true;
                        }
                ck_assert_msg(found, "%s (%d) is not in the table", name, code);
                seen++;
        }
        fclose(f);
        ck_assert_int_eq(seen, (int) n);
        ck_assert_int_gt(seen, 90);
}
END_TEST

/* Each entry: its class, and the variant each site makes of it. */
START_TEST(each_entry_maps_to_its_variant)
{
        size_t n;
        const cube__cu_entry *t = cube__cuda_results(&n);

        for (size_t i = 0; i < n; i++) {
                CUresult r = (CUresult) t[i].code;
                ck_assert_msg(t[i].cls == expected_class(t[i].code), "%s: class %d, expected %d",
                              t[i].name, t[i].cls, expected_class(t[i].code));
                ck_assert_int_eq(cube__cuda_class(r), t[i].cls);
                ck_assert_str_eq(cube__cuda_name(r), t[i].name);

                cube_error *l = cube__cuda_error(CUBE__CU_SITE_LAUNCH, r, 1024, "call");
                cube_error *io = cube__cuda_error(CUBE__CU_SITE_IO, r, 4096, "call");
                cube_error *m = cube__cuda_error(CUBE__CU_SITE_MODULE, r, 0, "call");
                ck_assert(strstr(cube_error_message(l), t[i].name) ||
                          t[i].cls == CUBE__CU_OUT_OF_MEMORY || t[i].cls == CUBE__CU_RESOURCES);
                switch (t[i].cls) {
                case CUBE__CU_POISON:
                        ck_assert_int_eq(cube_error_kind_of(l), CUBE_DEVICE_POISON);
                        ck_assert_int_eq(cube_error_kind_of(io), CUBE_DEVICE_POISON);
                        ck_assert_int_eq(cube_error_kind_of(m), CUBE_DEVICE_POISON);
                        break;
                case CUBE__CU_OUT_OF_MEMORY:
                        ck_assert_int_eq(cube_error_kind_of(l), CUBE_SERVER_LAUNCH);
                        ck_assert_int_eq(cube_error_kind_of(cube_error_source(l)),
                                         CUBE_LAUNCH_OUT_OF_MEMORY);
                        ck_assert_int_eq(cube_error_kind_of(cube_error_source(io)),
                                         CUBE_IO_OUT_OF_MEMORY);
                        ck_assert(cube_error_may_succeed_after_reclaim(io));
                        break;
                case CUBE__CU_RESOURCES:
                        ck_assert_int_eq(cube_error_kind_of(cube_error_source(l)),
                                         CUBE_LAUNCH_TOO_MANY_RESOURCES);
                        ck_assert(cube_error_is_refusal(l));
                        ck_assert(!cube_error_is_refusal(io));
                        break;
                case CUBE__CU_COMPILE:
                        ck_assert_int_eq(cube_error_kind_of(m), CUBE_COMPILATION_GENERIC);
                        ck_assert_int_eq(cube_error_kind_of(cube_error_source(l)),
                                         CUBE_LAUNCH_UNKNOWN);
                        break;
                default:
                        ck_assert_int_eq(cube_error_kind_of(cube_error_source(l)),
                                         CUBE_LAUNCH_UNKNOWN);
                        ck_assert_int_eq(cube_error_kind_of(cube_error_source(io)),
                                         CUBE_IO_UNKNOWN);
                        ck_assert_int_eq(cube_error_kind_of(cube_error_source(m)),
                                         CUBE_LAUNCH_UNKNOWN);
                        ck_assert(!cube_error_is_refusal(l) && !cube_error_is_device_poisoned(l));
                        break;
                }
                cube_error_free(l);
                cube_error_free(io);
                cube_error_free(m);
        }
}
END_TEST

START_TEST(an_unknown_code_is_a_named_defect)
{
        cube_error *e = cube__cuda_error(CUBE__CU_SITE_LAUNCH, (CUresult) 12345, 0, "cuFoo");

        ck_assert_int_eq(cube__cuda_class((CUresult) 12345), CUBE__CU_DEFECT);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_LAUNCH_UNKNOWN);
        ck_assert_ptr_nonnull(strstr(cube_error_message(e), "12345"));
        cube_error_free(e);
}
END_TEST

START_TEST(nvrtc_statuses)
{
        cube_error *src = cube__nvrtc_error(NVRTC_ERROR_COMPILATION, "k", "k.c(3): error: x");
        cube_error *oom = cube__nvrtc_error(NVRTC_ERROR_OUT_OF_MEMORY, "k", NULL);
        cube_error *internal = cube__nvrtc_error(NVRTC_ERROR_INTERNAL_ERROR, "k", NULL);
        cube_error *cancel = cube__nvrtc_error(NVRTC_ERROR_CANCELLED, "k", NULL);

        ck_assert_int_eq(cube_error_kind_of(src), CUBE_COMPILATION_GENERIC);
        ck_assert_ptr_nonnull(strstr(cube_error_message(src), "k.c(3)"));
        ck_assert(cube_error_is_refusal(src));
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(oom)), CUBE_LAUNCH_OUT_OF_MEMORY);
        ck_assert(!cube_error_is_refusal(internal) && !cube_error_is_refusal(cancel));
        ck_assert_ptr_nonnull(strstr(cube_error_message(internal), "NVRTC_ERROR_INTERNAL_ERROR"));
        cube_error_free(src);
        cube_error_free(oom);
        cube_error_free(internal);
        cube_error_free(cancel);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("cuda-errors");
        TCase *tc = tcase_create("table");
        SRunner *sr;
        int failed;

        tcase_add_test(tc, every_cuda_h_code_is_in_the_table);
        tcase_add_test(tc, each_entry_maps_to_its_variant);
        tcase_add_test(tc, an_unknown_code_is_a_named_defect);
        tcase_add_test(tc, nvrtc_statuses);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}
