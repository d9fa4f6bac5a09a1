/*
 * fuzz-replay.c - runs the fuzz target (fuzz-heap.c) without libFuzzer: built with the project's
 * compiler as a check program, so the target runs in every `make check`, and under Valgrind.
 *
 *   fuzz-replay FILE...                   each file is one input (a corpus entry, a crash artifact)
 *   fuzz-replay --random N SEED [--max-len L] [FILE...]
 *                                         also N inputs of pseudo-random bytes (xorshift64 from
 *                                         SEED, lengths 1 .. L, default 1024)
 *
 * A violation aborts the process (the target says what broke); exit status 0 means every input
 * ran clean. FUZZ_HEAP_VERBOSE=1 shows the library's reports of the hostile calls.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t xorshift64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "fuzz-replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (buf == NULL) {
            fprintf(stderr, "fuzz-replay: out of memory reading %s\n", path);
            fclose(f);
            return -1;
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        uint8_t *more = realloc(buf, cap);
        if (more == NULL)
            free(buf);
        buf = more;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "fuzz-replay: error reading %s\n", path);
        free(buf);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int usage(void)
{
    fputs("usage: fuzz-replay [--random N SEED [--max-len L]] [FILE...]\n", stderr);
    return 2;
}

static int parse_u64(const char *s, unsigned long long *out)
{
    char *end;
    errno = 0;
    *out = strtoull(s, &end, 0);
    return errno == 0 && end != s && *end == '\0' && s[0] != '-';
}

int main(int argc, char **argv)
{
    unsigned long long random_n = 0, seed = 1, max_len = 1024;
    int files = 0, failed = 0;
    LLVMFuzzerInitialize(&argc, &argv);
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--random") == 0) {
            if (a + 2 >= argc || !parse_u64(argv[a + 1], &random_n) || !parse_u64(argv[a + 2], &seed))
                return usage();
            a += 2;
        } else if (strcmp(argv[a], "--max-len") == 0) {
            if (a + 1 >= argc || !parse_u64(argv[a + 1], &max_len) || max_len == 0)
                return usage();
            a += 1;
        } else if (argv[a][0] == '-' && argv[a][1] != '\0') {
            return usage();
        } else {
            files++;
            if (run_file(argv[a]) != 0)
                failed++;
        }
    }
    if (seed == 0)
        seed = 0x9E3779B97F4A7C15ULL; /* xorshift's one bad seed */
    uint64_t state = seed;
    uint8_t *buf = malloc(max_len);
    if (buf == NULL && random_n != 0) {
        fputs("fuzz-replay: out of memory\n", stderr);
        return 1;
    }
    for (unsigned long long k = 0; k < random_n; k++) {
        /* short inputs are the common case; now and then one of the full length */
        uint64_t r = xorshift64(&state);
        size_t len = 1 + (size_t)(r % (r & 0x700 ? (max_len < 256 ? max_len : 256) : max_len));
        for (size_t i = 0; i < len; i += 8) {
            uint64_t w = xorshift64(&state);
            memcpy(buf + i, &w, len - i < 8 ? len - i : 8);
        }
        LLVMFuzzerTestOneInput(buf, len);
    }
    free(buf);
    printf("fuzz-replay: %d file(s)%s, %llu random input(s) from seed %llu\n", files, failed ? " (some unreadable)" : "",
           random_n, seed);
    return failed ? 1 : 0;
}
