/*
 * leaksupp.c - leak suppressions (FASTMM5_SUPPRESSIONS=path): loss records whose allocation
 * stack has a frame matching one of the file's patterns are counted as suppressed, not reported.
 *
 * One pattern a line; '*' matches any run of characters, '?' any one; blank lines and lines
 * starting with '#' are skipped. "fun:PATTERN" matches function names only, "obj:PATTERN" object
 * file names only (the path, or its last component); a bare pattern matches either. Only debug
 * blocks have stacks, so only they can be suppressed. The file is read into static storage
 * without allocating (the heap is what is being checked).
 */
#define _GNU_SOURCE 1 /* dladdr */
#include "internal.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#define SUPP_BYTES 16384u
#define SUPP_MAX 512u

typedef enum { MATCH_ANY, MATCH_FUNCTION, MATCH_OBJECT } match_t;

static char text[SUPP_BYTES];
static const char *patterns[SUPP_MAX];
static match_t matches[SUPP_MAX];
static unsigned pattern_count;
static bool loaded;

static bool starts_with(const char *s, const char *prefix)
{
    while (*prefix != '\0' && *s == *prefix)
        s++, prefix++;
    return *prefix == '\0';
}

static void add_line(char *line)
{
    while (*line == ' ' || *line == '\t')
        line++;
    size_t n = 0;
    while (line[n] != '\0')
        n++;
    while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r'))
        line[--n] = '\0';
    if (n == 0 || line[0] == '#' || pattern_count == SUPP_MAX)
        return;
    match_t m = MATCH_ANY;
    if (starts_with(line, "fun:"))
        m = MATCH_FUNCTION, line += 4;
    else if (starts_with(line, "obj:"))
        m = MATCH_OBJECT, line += 4;
    patterns[pattern_count] = line;
    matches[pattern_count++] = m;
}

void fm_leak_suppressions_load(const char *path)
{
    if (loaded || path == NULL || path[0] == '\0')
        return;
    loaded = true;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        static const char msg[] = "libfastmm5: warning: FASTMM5_SUPPRESSIONS: cannot read the file; no suppressions\n";
        fm_os_write_all(2, msg, sizeof msg - 1);
        return;
    }
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, text + len, SUPP_BYTES - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    text[len] = '\0';
    char *line = text;
    for (size_t i = 0; i <= len; i++)
        if (text[i] == '\n' || text[i] == '\0') {
            text[i] = '\0';
            add_line(line);
            line = text + i + 1;
        }
}

/* Glob match, iterative: '*' backtracks to its last position only. */
static bool glob(const char *p, const char *s)
{
    const char *star = NULL, *resume = NULL;
    while (*s != '\0') {
        if (*p == '*') {
            star = p++;
            resume = s;
        } else if (*p == '?' || *p == *s) {
            p++, s++;
        } else if (star != NULL) {
            p = star + 1;
            s = ++resume;
        } else {
            return false;
        }
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}

static const char *base_name(const char *path)
{
    const char *b = path;
    for (const char *c = path; *c != '\0'; c++)
        if (*c == '/')
            b = c + 1;
    return b;
}

bool fm_leak_suppressed(const uintptr_t *trace, unsigned depth)
{
    if (pattern_count == 0)
        return false;
    for (unsigned i = 0; i < depth; i++) {
        Dl_info info;
        if (trace[i] == 0 || dladdr((void *)(trace[i] - 1), &info) == 0)
            continue;
        for (unsigned k = 0; k < pattern_count; k++) {
            const char *p = patterns[k];
            if (matches[k] != MATCH_OBJECT && info.dli_sname != NULL && glob(p, info.dli_sname))
                return true;
            if (matches[k] != MATCH_FUNCTION && info.dli_fname != NULL &&
                (glob(p, info.dli_fname) || glob(p, base_name(info.dli_fname))))
                return true;
        }
    }
    return false;
}
