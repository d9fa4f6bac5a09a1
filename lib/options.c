/*
 * options.c - the FASTMM5_* environment variables: one table, and the settings they parse into.
 *
 * Every variable libfastmm5 knows is one row of `table` below: its name, the values it takes, its
 * default, its parser and its help text. The environment parser, the unknown-name warning and the
 * FASTMM5_VERBOSE listing (fm_options_list) all walk that table; doc/man/fastmm5.7 and
 * `fastmm5-run --help` list the same names (tests/option-names.sh compares them).
 *
 * Parsing only fills fm_options: init.c applies what belongs to other modules (error action,
 * stack depth, limits, log file) once, right after the read. So this file calls nothing above
 * the platform but the plain report writer, for its warnings.
 *
 * The environment is read at initialization without allocating (fm_os_getenv walks `environ`).
 * The first allocation can come before the C library has set `environ` up (the dynamic loader
 * allocates early), so init.c reads the options once more from a constructor.
 * An unknown FASTMM5_ name or a bad value gets one warning on standard error, never a failure.
 */
#include "internal.h"

extern char **environ;

fm_options_t fm_options = {
    .strategy = FM_STRATEGY_BALANCED,
    .error_action = -1,
    .stack_depth = -1,
};

static bool str_eq(const char *a, const char *b)
{
    while (*a != '\0' && *a == *b)
        a++, b++;
    return *a == *b;
}

static bool starts_with(const char *s, const char *prefix)
{
    while (*prefix != '\0' && *s == *prefix)
        s++, prefix++;
    return *prefix == '\0';
}

/* Compares the NAME part of an environment entry "NAME=value" with a name. */
static bool entry_is(const char *entry, const char *name)
{
    while (*name != '\0' && *entry == *name)
        entry++, name++;
    return *name == '\0' && *entry == '=';
}

void fm_options_warn(const char *name, const char *value, const char *problem)
{
    char buf[512];
    fm_report_t r = {buf, 0, sizeof buf};
    buf[0] = '\0';
    fm_report_str(&r, "libfastmm5: warning: ");
    fm_report_str(&r, name);
    if (value != NULL) {
        fm_report_str(&r, "=");
        fm_report_str(&r, value);
    }
    fm_report_str(&r, ": ");
    fm_report_str(&r, problem);
    fm_report_str(&r, "\n");
    fm_os_write_all(2, r.buf, r.len);
}

/* ---- value parsers: each returns false for a value it does not take ---- */

static bool bool_value(const char *v, bool *out)
{
    if (str_eq(v, "1") || str_eq(v, "yes") || str_eq(v, "true") || str_eq(v, "on"))
        *out = true;
    else if (str_eq(v, "0") || str_eq(v, "no") || str_eq(v, "false") || str_eq(v, "off") || str_eq(v, ""))
        *out = false;
    else
        return false;
    return true;
}

/* Decimal digits up to max, nothing else. */
static bool number_value(const char *v, unsigned max, unsigned *out)
{
    unsigned n = 0;
    const char *d = v;
    while (*d >= '0' && *d <= '9' && n <= max)
        n = n * 10 + (unsigned)(*d++ - '0');
    if (*d != '\0' || d == v || n > max)
        return false;
    *out = n;
    return true;
}

/* "<digits>[K|M|G]" (binary multiples, either case, optionally followed by "iB" or "B"). */
static bool size_value(const char *s, size_t *out)
{
    size_t n = 0;
    const char *d = s;
    if (*d < '0' || *d > '9')
        return false;
    for (; *d >= '0' && *d <= '9'; d++) {
        size_t digit = (size_t)(*d - '0');
        if (n > (SIZE_MAX - digit) / 10)
            return false;
        n = n * 10 + digit;
    }
    unsigned shift = 0;
    switch (*d) {
    case 'k': case 'K': shift = 10; d++; break;
    case 'm': case 'M': shift = 20; d++; break;
    case 'g': case 'G': shift = 30; d++; break;
    default: break;
    }
    if (shift != 0 && d[0] == 'i' && d[1] == 'B')
        d += 2;
    else if (shift != 0 && d[0] == 'B')
        d++;
    if (*d != '\0' || (shift != 0 && n > (SIZE_MAX >> shift)))
        return false;
    *out = n << shift;
    return true;
}

static bool parse_stats(const char *v, fm_options_t *o)
{
    if (str_eq(v, "json")) {
        o->stats_at_exit = true;
        o->stats_json = true;
        return true;
    }
    return bool_value(v, &o->stats_at_exit);
}

static bool parse_on_error(const char *v, fm_options_t *o)
{
    if (str_eq(v, "abort"))
        o->error_action = FASTMM_ON_ERROR_ABORT;
    else if (str_eq(v, "continue"))
        o->error_action = FASTMM_ON_ERROR_CONTINUE;
    else
        return false;
    return true;
}

static bool parse_log(const char *v, fm_options_t *o)
{
    o->log_path = v;
    return true;
}

static bool parse_strategy(const char *v, fm_options_t *o)
{
    if (str_eq(v, "speed"))
        o->strategy = FM_STRATEGY_SPEED;
    else if (str_eq(v, "balanced"))
        o->strategy = FM_STRATEGY_BALANCED;
    else if (str_eq(v, "low-memory"))
        o->strategy = FM_STRATEGY_LOW_MEMORY;
    else
        return false;
    return true;
}

static bool parse_verbose(const char *v, fm_options_t *o) { return bool_value(v, &o->verbose); }
static bool parse_debug(const char *v, fm_options_t *o) { return bool_value(v, &o->debug_at_start); }
static bool parse_disable_asm(const char *v, fm_options_t *o) { return bool_value(v, &o->disable_asm); }
static bool parse_disable_avx2(const char *v, fm_options_t *o) { return bool_value(v, &o->disable_avx2); }
static bool parse_disable_avx512(const char *v, fm_options_t *o) { return bool_value(v, &o->disable_avx512); }

static bool parse_stack_depth(const char *v, fm_options_t *o)
{
    unsigned n;
    if (!number_value(v, 64, &n))
        return false;
    o->stack_depth = (int)n;
    return true;
}

static bool parse_report_leaks(const char *v, fm_options_t *o)
{
    if (str_eq(v, "all")) {
        o->report_leaks = true;
        o->report_leaks_all = true;
        return true;
    }
    return bool_value(v, &o->report_leaks);
}

static bool parse_leak_exit_code(const char *v, fm_options_t *o)
{
    unsigned n;
    if (!number_value(v, 255, &n))
        return false;
    o->leak_exit_code = (int)n;
    return true;
}

static bool parse_suppressions(const char *v, fm_options_t *o)
{
    o->suppressions = v;
    return true;
}

static bool parse_guard(const char *v, fm_options_t *o)
{
    o->guard = v; /* its values are parsed by guard.c, which warns itself */
    return true;
}
static bool parse_quarantine(const char *v, fm_options_t *o) { return size_value(v, &o->quarantine); }
static bool parse_memory_limit(const char *v, fm_options_t *o)
{
    if (!size_value(v, &o->memory_limit))
        return false;
    o->memory_limit_set = true;
    return true;
}

static bool parse_min_alignment(const char *v, fm_options_t *o)
{
    if (str_eq(v, "8") || str_eq(v, "16") || str_eq(v, "32") || str_eq(v, "64"))
        o->min_alignment = (unsigned)(v[1] == '\0' ? 8 : v[0] == '1' ? 16 : v[0] == '3' ? 32 : 64);
    else
        return false;
    return true;
}

static bool parse_erase(const char *v, fm_options_t *o)
{
    bool both = str_eq(v, "both");
    if (both || str_eq(v, "allocated"))
        o->erase_allocated = true;
    if (both || str_eq(v, "freed"))
        o->erase_freed = true;
    return o->erase_allocated || o->erase_freed;
}

/* Any subset of the names, comma-separated; "none" for neither of FastMM5's two defaults. */
static bool parse_debug_options(const char *v, fm_options_t *o)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {
        {"never-free-small-spans", FASTMM_DEBUG_NEVER_FREE_SMALL_SPANS},
        {"never-merge", FASTMM_DEBUG_NEVER_MERGE_FREE_MEDIUM_BLOCKS},
        {"scan-every-operation", FASTMM_DEBUG_SCAN_EVERY_OPERATION},
        {"none", 0},
    };
    unsigned options = 0;
    for (const char *item = v; *item != '\0';) {
        size_t n = 0;
        while (item[n] != '\0' && item[n] != ',')
            n++;
        bool known = false;
        for (size_t i = 0; i < sizeof names / sizeof names[0] && !known; i++) {
            size_t k = 0;
            while (k < n && names[i].name[k] == item[k])
                k++;
            if (k == n && names[i].name[k] == '\0') {
                options |= names[i].bit;
                known = true;
            }
        }
        if (!known)
            return false;
        item += n + (item[n] == ',');
    }
    o->debug_options = options;
    o->debug_options_set = true;
    return true;
}

static bool parse_valgrind_slack(const char *v, fm_options_t *o)
{
    o->valgrind_slack_usable = v[0] == 'u';
    return true;
}

/* ---- the table ---- */

typedef struct fm_option {
    const char *name;
    const char *values;   /* what it takes, as fastmm5(7) writes it */
    const char *fallback; /* what is in force while it is unset */
    /* Fills fm_options from a set value; false: a value it does not take (warned, ignored).
     * NULL: read where it is used (a tool, or the symbolizer when a report starts it). */
    bool (*parse)(const char *value, fm_options_t *o);
    const char *expected; /* the warning's words for a value parse refused */
    const char *help;
} fm_option_t;

#define EXPECT_BOOL "expected 1 or 0; ignored"

/* In the order they are read, which is the order of their warnings. */
static const fm_option_t table[] = {
    [FM_OPT_STRATEGY] = {"FASTMM5_STRATEGY", "speed|balanced|low-memory", "balanced", parse_strategy,
                         "expected speed, balanced or low-memory; ignored",
                         "medium spans of 4, 3 or 1.5 MiB"},
    [FM_OPT_ON_ERROR] = {"FASTMM5_ON_ERROR", "abort|continue", "abort", parse_on_error,
                         "expected abort or continue; ignored", "what follows a reported error"},
    [FM_OPT_STATS] = {"FASTMM5_STATS", "1|0|json", "0", parse_stats, "expected 1, 0 or json; ignored",
                      "the usage report (or JSON state) on standard error at exit"},
    [FM_OPT_MEMORY_LIMIT] = {"FASTMM5_MEMORY_LIMIT", "bytes[K|M|G]", "0 (none)", parse_memory_limit,
                             "expected a number of bytes with an optional K, M or G suffix; ignored",
                             "a limit on the memory held from the OS"},
    [FM_OPT_MIN_ALIGNMENT] = {"FASTMM5_MIN_ALIGNMENT", "8|16|32|64", "the ABI's", parse_min_alignment,
                              "expected 8, 16, 32 or 64; ignored", "the least alignment of small blocks"},
    [FM_OPT_VERBOSE] = {"FASTMM5_VERBOSE", "1|0", "0", parse_verbose, EXPECT_BOOL,
                        "this listing and the settings in force, at start-up"},
    [FM_OPT_DISABLE_ASM] = {"FASTMM5_DISABLE_ASM", "1|0", "0", parse_disable_asm, EXPECT_BOOL,
                            "the portable C kernels, not the assembly ones"},
    [FM_OPT_DISABLE_AVX2] = {"FASTMM5_DISABLE_AVX2", "1|0", "0", parse_disable_avx2, EXPECT_BOOL,
                             "the SSE2 kernels on an AVX2 processor"},
    [FM_OPT_DISABLE_AVX512] = {"FASTMM5_DISABLE_AVX512", "1|0", "0", parse_disable_avx512, EXPECT_BOOL,
                               "the AVX2 kernels on an AVX-512 processor"},
    [FM_OPT_DEBUG] = {"FASTMM5_DEBUG", "1|0", "0", parse_debug, EXPECT_BOOL, "start in debug mode"},
    [FM_OPT_REPORT_LEAKS] = {"FASTMM5_REPORT_LEAKS", "1|0|all", "0", parse_report_leaks, EXPECT_BOOL,
                             "the leak check at exit (all: still-reachable blocks too)"},
    [FM_OPT_LEAK_EXIT_CODE] = {"FASTMM5_LEAK_EXIT_CODE", "n", "0 (the program's)", parse_leak_exit_code,
                               "expected a number from 0 to 255; ignored",
                               "the exit status when a block is definitely lost"},
    [FM_OPT_SUPPRESSIONS] = {"FASTMM5_SUPPRESSIONS", "path", "none", parse_suppressions, NULL,
                             "a file of stack patterns whose leaks are not reported"},
    [FM_OPT_STACK_DEPTH] = {"FASTMM5_STACK_DEPTH", "0..64", "20", parse_stack_depth,
                            "expected a number from 0 to 64; ignored",
                            "return addresses per debug-mode stack trace"},
    [FM_OPT_ERASE] = {"FASTMM5_ERASE", "allocated|freed|both", "none", parse_erase,
                      "expected allocated, freed or both; ignored",
                      "fill new blocks with 0x90, freed ones with 0x80"},
    [FM_OPT_DEBUG_OPTIONS] = {"FASTMM5_DEBUG_OPTIONS", "list", "never-free-small-spans,never-merge",
                              parse_debug_options,
                              "expected a comma-separated list of never-free-small-spans, never-merge, "
                              "scan-every-operation or none; ignored",
                              "FastMM5's debug options (or none)"},
    [FM_OPT_LOG] = {"FASTMM5_LOG", "path", "none", parse_log, NULL,
                    "also append every event report to this file"},
    [FM_OPT_VALGRIND_SLACK] = {"FASTMM5_VALGRIND_SLACK", "usable", "requested", parse_valgrind_slack, NULL,
                               "under Valgrind: blocks are their usable size for memcheck"},
    [FM_OPT_SYMBOLIZER] = {"FASTMM5_SYMBOLIZER", "path|none", "the installed fastmm5-symbolize", NULL, NULL,
                           "the program that names report addresses"},
    [FM_OPT_GUARD] = {"FASTMM5_GUARD", "all|overflow|underflow|sample:N", "off", parse_guard, NULL,
                      "place blocks against no-access pages (every block, or one in N)"},
    [FM_OPT_QUARANTINE] = {"FASTMM5_QUARANTINE", "bytes[K|M|G]", "0 (off)", parse_quarantine,
                           "expected a number of bytes with an optional K, M or G suffix; ignored",
                           "debug mode: freed blocks wait this many bytes before reuse"},
    [FM_OPT_LIB] = {"FASTMM5_LIB", "path", "the installed library", NULL, NULL,
                    "the library fastmm5-stats preloads (read by that tool only)"},
};
_Static_assert(sizeof table / sizeof table[0] == FM_OPT_COUNT, "one table row per fm_option_id_t");

const char *fm_option_name(fm_option_id_t id) { return table[id].name; }

const char *fm_option_value(fm_option_id_t id)
{
    return fm_os_getenv(table[id].name);
}

static void check_unknown_names(void)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (!starts_with(*e, "FASTMM5_"))
            continue;
        bool known = false;
        for (size_t i = 0; i < FM_OPT_COUNT && !known; i++)
            known = entry_is(*e, table[i].name);
        if (known)
            continue;
        char name[64];
        size_t n = 0;
        while ((*e)[n] != '=' && (*e)[n] != '\0' && n + 1 < sizeof name)
            name[n] = (*e)[n], n++;
        name[n] = '\0';
        fm_options_warn(name, NULL, "unknown libfastmm5 option; ignored");
    }
}

static bool options_read;

/* Returns false (and reads nothing) while the C library has not set the environment up yet. */
bool fm_options_init(void)
{
    if (options_read)
        return true;
    if (environ == NULL)
        return false;
    options_read = true;
    check_unknown_names();
    for (size_t i = 0; i < FM_OPT_COUNT; i++) {
        const char *v = table[i].parse != NULL ? fm_os_getenv(table[i].name) : NULL;
        if (v != NULL && !table[i].parse(v, &fm_options))
            fm_options_warn(table[i].name, v, table[i].expected);
    }
    return true;
}

/* FastMM5's medium span sizes per optimization strategy. */
size_t fm_options_medium_span_size(void)
{
    switch (fm_options.strategy) {
    case FM_STRATEGY_SPEED:
        return (size_t)4 << 20;
    case FM_STRATEGY_LOW_MEMORY:
        return (size_t)3 << 19;
    default:
        return (size_t)3 << 20;
    }
}

/* FASTMM5_VERBOSE=1: one line per variable of the table, with its value where it is set. */
void fm_options_list(int fd)
{
    for (size_t i = 0; i < FM_OPT_COUNT; i++) {
        const fm_option_t *t = &table[i];
        const char *v = fm_os_getenv(t->name);
        char buf[512];
        fm_report_t r = {buf, 0, sizeof buf};
        buf[0] = '\0';
        fm_report_str(&r, "libfastmm5:   ");
        fm_report_str(&r, t->name);
        fm_report_str(&r, v != NULL ? "=" : " unset");
        fm_report_str(&r, v != NULL ? v : "");
        fm_report_str(&r, " (");
        fm_report_str(&r, t->values);
        fm_report_str(&r, "; default ");
        fm_report_str(&r, t->fallback);
        fm_report_str(&r, "): ");
        fm_report_str(&r, t->help);
        fm_report_str(&r, "\n");
        fm_os_write_all(fd, r.buf, r.len);
    }
}
