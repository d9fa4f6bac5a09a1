/* tests/glibc/config-shim.h - what a glibc build tree would give glibc's support/ library and
 * malloc tests, for building them standalone against the installed glibc
 * (tests/glibc-malloc-tests.sh forces it into every file with `gcc -include`).
 *
 * Inside glibc these come from the generated config.h and the internal headers under include/,
 * which cannot be used here (they wrap the public headers for building libc itself). The
 * self-contained internal headers the tests include (libc-diag.h, array_length.h, intprops.h,
 * malloc-size.h, malloc-alignment.h) are linked from the glibc source tree by the script; only
 * what is left is defined here.
 */
#ifndef FASTMM5_GLIBC_CONFIG_SHIM_H
#define FASTMM5_GLIBC_CONFIG_SHIM_H

/* support/support_test_main.c multiplies the tests' timeouts by it (config.h: configure's
 * --with-timeoutfactor, 1 by default); TEST_TIMEOUT_FACTOR in the environment still applies. */
#define TIMEOUTFACTOR 1

/* support/temp_file.c uses NAME_MAX, which glibc's internal headers bring in. */
#include <limits.h>

#endif
