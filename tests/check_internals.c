/*
 * check_internals.c - white-box tests of internal invariants that two pieces of code must agree
 * on, a Check program of its own (tests/check_internals): like check_kernels it links the
 * convenience library lib/libfastmm5_core.la, whose fm_* names are hidden in libfastmm5.so.
 *
 * The medium bin of a request is computed twice: malloc's inline thread-cache path uses the
 * shift in fm_tcache_medium_bin_for (internal.h), the arenas use fm_medium_round_request and
 * fm_medium_bin_of (sizeclass.c). If they disagreed for some size, a cached block would be
 * handed to a request it is too small for, or never found again. The same holds for the bin of
 * a freed block (free's inline fm_tcache_medium_bin_of against fm_medium_bin_of).
 */
#include <config.h>

#include <check.h>
#include <stdlib.h>

#include "internal.h"

/* Guards: for every request the thread cache serves, its bin is the arenas' bin of the rounded
 * request, and every block in that bin has room for the request and its header. */
START_TEST(medium_cache_bin_matches_arena_bin)
{
    ck_assert_uint_lt(fm_tcache_medium_bin_for(FM_TCACHE_MEDIUM_MAX_USER), FM_TCACHE_MEDIUM_BINS);
    for (size_t size = FM_SMALL_MAX_USER + 1; size <= FM_TCACHE_MEDIUM_MAX_USER; size++) {
        unsigned cached = fm_tcache_medium_bin_for(size);
        unsigned arena = fm_medium_bin_of(fm_medium_round_request(size));
        if (cached != arena)
            ck_abort_msg("size %zu: thread cache bin %u, arena bin %u", size, cached, arena);
        if (fm_medium_bin_size(cached) < size + FM_MEDIUM_HEADER)
            ck_abort_msg("size %zu: bin %u holds blocks of %zu bytes", size, cached, fm_medium_bin_size(cached));
    }
    /* the first size past the cache's range is beyond its last bin */
    ck_assert_uint_ge(fm_medium_bin_of(fm_medium_round_request(FM_TCACHE_MEDIUM_MAX_USER + 1)), FM_TCACHE_MEDIUM_BINS);
}
END_TEST

/* Guards: free()'s inline bin of a freed medium block (fm_tcache_medium_bin_of) is the bin the
 * arenas give it, for every block size whose bin the thread cache holds, and the sizes just
 * outside are not in those bins. */
START_TEST(medium_block_bin_inline_matches)
{
    for (size_t block = FM_MEDIUM_MIN_BLOCK; block < FM_TCACHE_MEDIUM_BLOCK_END; block++) {
        unsigned inline_bin = fm_tcache_medium_bin_of(block);
        unsigned arena = fm_medium_bin_of(block);
        if (inline_bin != arena || inline_bin >= FM_TCACHE_MEDIUM_BINS)
            ck_abort_msg("block of %zu bytes: inline bin %u, arena bin %u", block, inline_bin, arena);
    }
    ck_assert_uint_ge(fm_medium_bin_of(FM_TCACHE_MEDIUM_BLOCK_END), FM_TCACHE_MEDIUM_BINS);
    ck_assert_uint_eq(fm_medium_bin_of(FM_MEDIUM_MIN_BLOCK), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("internals");
    TCase *tc = tcase_create("sizes");
    tcase_add_test(tc, medium_cache_bin_matches_arena_bin);
    tcase_add_test(tc, medium_block_bin_inline_matches);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
