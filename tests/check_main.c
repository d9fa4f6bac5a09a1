/*
 * check_main.c - the one runner for the libfastmm5 Check suites.
 *
 * Check itself honours CK_RUN_SUITE / CK_RUN_CASE (run one suite or case), CK_FORK=no (run in
 * process, e.g. under valgrind), CK_VERBOSITY, CK_TIMEOUT_MULTIPLIER and the log-file variables.
 * FASTMM_TEST_SLOW=1 divides the heavy loops by ten (see test_iters()).
 * Exit status: 0 when every test passed, 1 otherwise.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"

int test_slow(void)
{
    const char *s = getenv("FASTMM_TEST_SLOW");
    return s != NULL && *s != '\0';
}

int test_iters(int n)
{
    if (!test_slow())
        return n;
    n /= 10;
    return n < 1 ? 1 : n;
}

int test_forking(void)
{
    const char *f = getenv("CK_FORK");
    return !(f != NULL && strcmp(f, "no") == 0);
}

int guard_scenario(const char *name); /* check_guard.c */

int main(void)
{
    /* a guard test's child process (check_guard.c): one scenario instead of the suites */
    const char *scenario = getenv("FASTMM_TEST_GUARD_SCENARIO");
    if (scenario != NULL)
        return guard_scenario(scenario);
    SRunner *sr = srunner_create(suite_alloc());
    srunner_add_suite(sr, suite_realloc());
    srunner_add_suite(sr, suite_errors());
    srunner_add_suite(sr, suite_threads());
    srunner_add_suite(sr, suite_usage());
    srunner_add_suite(sr, suite_debug());
    srunner_add_suite(sr, suite_introspection());
    srunner_add_suite(sr, suite_exhaustion());
    srunner_add_suite(sr, suite_misuse());
    srunner_add_suite(sr, suite_leaks());
    srunner_add_suite(sr, suite_traces());
    srunner_add_suite(sr, suite_guard());

    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
