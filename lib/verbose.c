/*
 * verbose.c - FASTMM5_VERBOSE=1: what libfastmm5 says at start-up about its settings.
 *
 * One line of what is in force (from the modules that hold it: debug mode, error action,
 * kernels, limit, alignment), then the options table's listing (options.c). It reads every
 * layer, so it sits with init.c, its one caller, above them all.
 */
#include "internal.h"

static void describe_in_force(int fd)
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

void fm_verbose_describe(int fd)
{
    describe_in_force(fd);
    static const char heading[] = "libfastmm5: environment variables:\n";
    fm_os_write_all(fd, heading, sizeof heading - 1);
    fm_options_list(fd);
}
