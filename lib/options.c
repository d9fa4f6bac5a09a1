/*
 * options.c - the run-time settings and the FASTMM5_* environment variables that set them.
 *
 * The environment is read at initialization without allocating (fm_os_getenv walks `environ`).
 * The first allocation can come before the C library has set `environ` up (the dynamic loader
 * allocates early), so init.c reads the options once more from a constructor.
 * An unknown FASTMM5_ name or a bad value gets one warning on standard error, never a failure.
 */
#include "internal.h"

extern char **environ;

fm_options_t fm_options = {.strategy = FM_STRATEGY_BALANCED};

/* Every name the library knows. Planned names are accepted and reported as not yet available. */
static const char *const known_names[] = {
    "FASTMM5_STATS", "FASTMM5_ON_ERROR", "FASTMM5_LOG", "FASTMM5_STRATEGY", "FASTMM5_VERBOSE",
    "FASTMM5_DEBUG", "FASTMM5_STACK_DEPTH", "FASTMM5_REPORT_LEAKS", "FASTMM5_DISABLE_ASM",
    "FASTMM5_DISABLE_AVX2",
    "FASTMM5_VALGRIND_SLACK", "FASTMM5_ERASE", "FASTMM5_DEBUG_OPTIONS",
    "FASTMM5_LIB", /* read by tools/fastmm5-stats, not by the library */
    "FASTMM5_MEMORY_LIMIT", "FASTMM5_MIN_ALIGNMENT", "FASTMM5_LEAK_EXIT_CODE", "FASTMM5_SUPPRESSIONS",
    "FASTMM5_SYMBOLIZER", "FASTMM5_GUARD", "FASTMM5_QUARANTINE",
};
static const char *const planned_names[] = {""};

static bool str_eq(const char *a, const char *b)
{
    while (*a != '\0' && *a == *b)
        a++, b++;
    return *a == *b;
}

/* Compares the NAME part of an environment entry "NAME=value" with a name. */
static bool entry_is(const char *entry, const char *name)
{
    while (*name != '\0' && *entry == *name)
        entry++, name++;
    return *name == '\0' && *entry == '=';
}

static void warn(const char *name, const char *value, const char *problem)
{
    fm_report_t r;
    char buf[512];
    r.buf = buf;
    r.cap = sizeof buf;
    r.len = 0;
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

static bool parse_bool(const char *name, const char *v, bool *out)
{
    if (v == NULL)
        return false;
    if (str_eq(v, "1") || str_eq(v, "yes") || str_eq(v, "true") || str_eq(v, "on"))
        *out = true;
    else if (str_eq(v, "0") || str_eq(v, "no") || str_eq(v, "false") || str_eq(v, "off") || str_eq(v, ""))
        *out = false;
    else {
        warn(name, v, "expected 1 or 0; ignored");
        return false;
    }
    return true;
}

static bool starts_with(const char *s, const char *prefix)
{
    while (*prefix != '\0' && *s == *prefix)
        s++, prefix++;
    return *prefix == '\0';
}

static void check_unknown_names(void)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (!starts_with(*e, "FASTMM5_"))
            continue;
        bool known = false;
        for (size_t i = 0; i < sizeof known_names / sizeof known_names[0]; i++)
            known = known || entry_is(*e, known_names[i]);
        char name[64];
        size_t n = 0;
        while ((*e)[n] != '=' && (*e)[n] != '\0' && n + 1 < sizeof name)
            name[n] = (*e)[n], n++;
        name[n] = '\0';
        if (!known)
            warn(name, NULL, "unknown libfastmm5 option; ignored");
        for (size_t i = 0; i < sizeof planned_names / sizeof planned_names[0]; i++)
            if (planned_names[i][0] != '\0' && entry_is(*e, planned_names[i]))
                warn(name, NULL, "not available in this version of libfastmm5 yet; ignored");
    }
}

static void read_strategy(void)
{
    const char *v = fm_os_getenv("FASTMM5_STRATEGY");
    if (v == NULL)
        return;
    if (str_eq(v, "speed"))
        fm_options.strategy = FM_STRATEGY_SPEED;
    else if (str_eq(v, "balanced"))
        fm_options.strategy = FM_STRATEGY_BALANCED;
    else if (str_eq(v, "low-memory"))
        fm_options.strategy = FM_STRATEGY_LOW_MEMORY;
    else
        warn("FASTMM5_STRATEGY", v, "expected speed, balanced or low-memory; ignored");
}

static void read_error_action(void)
{
    const char *v = fm_os_getenv("FASTMM5_ON_ERROR");
    if (v == NULL)
        return;
    if (str_eq(v, "abort"))
        fastmm_set_error_action(FASTMM_ON_ERROR_ABORT);
    else if (str_eq(v, "continue"))
        fastmm_set_error_action(FASTMM_ON_ERROR_CONTINUE);
    else
        warn("FASTMM5_ON_ERROR", v, "expected abort or continue; ignored");
}

static void read_stack_depth(void)
{
    const char *v = fm_os_getenv("FASTMM5_STACK_DEPTH");
    if (v == NULL)
        return;
    unsigned n = 0;
    const char *d = v;
    while (*d >= '0' && *d <= '9' && n <= 64)
        n = n * 10 + (unsigned)(*d++ - '0');
    if (*d != '\0' || d == v || n > 64) {
        warn("FASTMM5_STACK_DEPTH", v, "expected a number from 0 to 64; ignored");
        return;
    }
    fastmm_debug_set_stack_depth(n);
}

/* FASTMM5_STATS=1|0|json (json: fastmm_write_json at exit instead of the text report). */
static void read_stats(void)
{
    const char *v = fm_os_getenv("FASTMM5_STATS");
    if (v != NULL && str_eq(v, "json")) {
        fm_options.stats_at_exit = true;
        fm_options.stats_json = true;
        return;
    }
    if (v != NULL && !(str_eq(v, "1") || str_eq(v, "yes") || str_eq(v, "true") || str_eq(v, "on") ||
                       str_eq(v, "0") || str_eq(v, "no") || str_eq(v, "false") || str_eq(v, "off") || str_eq(v, ""))) {
        warn("FASTMM5_STATS", v, "expected 1, 0 or json; ignored");
        return;
    }
    parse_bool("FASTMM5_STATS", v, &fm_options.stats_at_exit);
}

/* FASTMM5_REPORT_LEAKS=1|0|all (all: the still-reachable blocks too). */
static void read_report_leaks(void)
{
    const char *v = fm_os_getenv("FASTMM5_REPORT_LEAKS");
    if (v != NULL && str_eq(v, "all")) {
        fm_options.report_leaks = true;
        fm_options.report_leaks_all = true;
        return;
    }
    parse_bool("FASTMM5_REPORT_LEAKS", v, &fm_options.report_leaks);
}

/* FASTMM5_LEAK_EXIT_CODE=N (1..255): the exit status when the exit-time check finds a definite leak. */
static void read_leak_exit_code(void)
{
    const char *v = fm_os_getenv("FASTMM5_LEAK_EXIT_CODE");
    if (v == NULL)
        return;
    int n = 0;
    const char *d = v;
    while (*d >= '0' && *d <= '9' && n <= 255)
        n = n * 10 + (*d++ - '0');
    if (*d != '\0' || d == v || n > 255)
        warn("FASTMM5_LEAK_EXIT_CODE", v, "expected a number from 0 to 255; ignored");
    else
        fm_options.leak_exit_code = n;
}

/* FASTMM5_MEMORY_LIMIT=<bytes>[K|M|G] (0: unlimited). */
static void read_memory_limit(void)
{
    const char *v = fm_os_getenv("FASTMM5_MEMORY_LIMIT");
    size_t n;
    if (v == NULL)
        return;
    if (fm_tuning_parse_size(v, &n))
        fm_os_set_limit(n);
    else
        warn("FASTMM5_MEMORY_LIMIT", v, "expected a number of bytes with an optional K, M or G suffix; ignored");
}

/* FASTMM5_QUARANTINE=<bytes>[K|M|G]: freed debug blocks held back (quarantine.c; 0: off). */
static void read_quarantine(void)
{
    const char *v = fm_os_getenv("FASTMM5_QUARANTINE");
    size_t n;
    if (v != NULL && fm_tuning_parse_size(v, &n))
        fm_options.quarantine = n;
    else if (v != NULL)
        warn("FASTMM5_QUARANTINE", v, "expected a number of bytes with an optional K, M or G suffix; ignored");
}

/* FASTMM5_MIN_ALIGNMENT=8|16|32|64, applied by fm_tuning_start once the heap is ready. */
static void read_min_alignment(void)
{
    const char *v = fm_os_getenv("FASTMM5_MIN_ALIGNMENT");
    if (v == NULL)
        return;
    if (str_eq(v, "8") || str_eq(v, "16") || str_eq(v, "32") || str_eq(v, "64"))
        fm_options.min_alignment = (unsigned)(v[1] == '\0' ? 8 : v[0] == '1' ? 16 : v[0] == '3' ? 32 : 64);
    else
        warn("FASTMM5_MIN_ALIGNMENT", v, "expected 8, 16, 32 or 64; ignored");
}

/* FASTMM5_ERASE=allocated|freed|both: FastMM5's erase modes from start-up. */
static void read_erase(void)
{
    const char *v = fm_os_getenv("FASTMM5_ERASE");
    if (v == NULL)
        return;
    bool both = str_eq(v, "both");
    if (both || str_eq(v, "allocated"))
        fm_options.erase_allocated = true;
    if (both || str_eq(v, "freed"))
        fm_options.erase_freed = true;
    if (!fm_options.erase_allocated && !fm_options.erase_freed)
        warn("FASTMM5_ERASE", v, "expected allocated, freed or both; ignored");
}

/* FASTMM5_DEBUG_OPTIONS=never-free-small-spans,never-merge,scan-every-operation (any subset,
 * comma-separated; "none" for neither of FastMM5's two defaults). */
static void read_debug_options(void)
{
    const char *v = fm_os_getenv("FASTMM5_DEBUG_OPTIONS");
    if (v == NULL)
        return;
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
        if (!known) {
            warn("FASTMM5_DEBUG_OPTIONS", v,
                 "expected a comma-separated list of never-free-small-spans, never-merge, "
                 "scan-every-operation or none; ignored");
            return;
        }
        item += n + (item[n] == ',');
    }
    fastmm_debug_set_options(options);
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
    read_strategy();
    read_error_action();
    read_stats();
    read_memory_limit();
    read_quarantine();
    read_min_alignment();
    parse_bool("FASTMM5_VERBOSE", fm_os_getenv("FASTMM5_VERBOSE"), &fm_options.verbose);
    parse_bool("FASTMM5_DISABLE_ASM", fm_os_getenv("FASTMM5_DISABLE_ASM"), &fm_options.disable_asm);
    parse_bool("FASTMM5_DISABLE_AVX2", fm_os_getenv("FASTMM5_DISABLE_AVX2"), &fm_kernels_avx2_disabled);
    parse_bool("FASTMM5_DEBUG", fm_os_getenv("FASTMM5_DEBUG"), &fm_options.debug_at_start);
    read_report_leaks();
    read_leak_exit_code();
    fm_options.suppressions = fm_os_getenv("FASTMM5_SUPPRESSIONS");
    fm_options.guard = fm_os_getenv("FASTMM5_GUARD"); /* parsed by guard.c */
    read_stack_depth();
    read_erase();
    read_debug_options();
    const char *log = fm_os_getenv("FASTMM5_LOG");
    if (log != NULL && !fm_event_set_log_path(log))
        warn("FASTMM5_LOG", log, "cannot open the file for appending; events go to standard error only");
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

/* FASTMM5_VERBOSE=1: one line saying what is in force. */
void fm_options_describe(int fd)
{
    static const char *const strategies[] = {"speed", "balanced", "low-memory"};
    char buf[512];
    fm_report_t r = {buf, 0, sizeof buf};
    buf[0] = '\0';
    fm_report_str(&r, "libfastmm5: strategy ");
    fm_report_str(&r, strategies[fm_options.strategy]);
    fm_report_str(&r, ", medium spans of ");
    fm_report_dec(&r, fm_options_medium_span_size() >> 10);
    fm_report_str(&r, " KiB, debug mode ");
    fm_report_str(&r, fastmm_debug_active() ? "on" : "off");
    fm_report_str(&r, " (stack depth ");
    fm_report_dec(&r, fastmm_debug_stack_depth());
    fm_report_str(&r, "), on error ");
    fm_report_str(&r, fastmm_error_action() == FASTMM_ON_ERROR_CONTINUE ? "continue" : "abort");
    fm_report_str(&r, ", kernels: ");
    fm_report_str(&r, fm_kernels_name());
    fm_report_str(&r, fm_options.report_leaks_all ? ", leak report at exit (all blocks)"
                      : fm_options.report_leaks ? ", leak report at exit" : "");
    fm_report_str(&r, ", memory limit ");
    if (fm_os_limit() == 0)
        fm_report_str(&r, "none");
    else {
        fm_report_dec(&r, fm_os_limit());
        fm_report_str(&r, " bytes");
    }
    fm_report_str(&r, ", minimum alignment ");
    fm_report_dec(&r, fm_tuning_min_alignment());
    fm_report_str(&r, fm_options.stats_json ? ", JSON statistics at exit"
                                            : fm_options.stats_at_exit ? ", usage report at exit" : "");
    fm_report_str(&r, "\n");
    fm_os_write_all(fd, r.buf, r.len);
}
