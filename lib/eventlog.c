/*
 * eventlog.c - turns allocator events into reports: written to standard error and the log file,
 * passed to the user's handler, then the configured action (abort, or continue).
 *
 * Reports are built in one static buffer under a lock, with hand-written number formatting:
 * nothing here allocates, because the heap is exactly what may be broken.
 */
#include "internal.h"

#include <stdlib.h>
#include <time.h>

#define REPORT_CAPACITY 32768

static fm_lock_t report_lock;
static char report_buffer[REPORT_CAPACITY];
static fastmm_event_handler_t handler;
static void *handler_user;
static fastmm_error_action_t error_action = FASTMM_ON_ERROR_ABORT;
static char log_path[1024];
static bool log_enabled;
/* Where leak reports go instead of standard error: init.c's duplicate of it, taken at start-up,
 * because many programs close standard error before they exit (gnulib's close_stdout does). */
static int leak_fd = 2;

void fm_report_str(fm_report_t *r, const char *s)
{
    while (*s != '\0' && r->len + 1 < r->cap)
        r->buf[r->len++] = *s++;
    r->buf[r->len] = '\0';
}

static void report_digits(fm_report_t *r, uint64_t v, unsigned base, unsigned min_digits)
{
    char tmp[24];
    unsigned n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v != 0 || n < min_digits);
    char out[25];
    for (unsigned i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = '\0';
    fm_report_str(r, out);
}

void fm_report_hex(fm_report_t *r, uintptr_t v)
{
    fm_report_str(r, "0x");
    report_digits(r, v, 16, 1);
}

void fm_report_dec(fm_report_t *r, uint64_t v) { report_digits(r, v, 10, 1); }

/* FastMM5's dump: 32 bytes a line, hex then ASCII (33..126 printable, else '.'). */
void fm_report_dump(fm_report_t *r, const void *p, size_t n)
{
    fm_track_internal((void *)p, n); /* under memcheck: a dump reads whatever is there */
    const unsigned char *b = p;
    for (size_t line = 0; line < n; line += 32) {
        fm_report_str(r, "\n  ");
        fm_report_hex(r, (uintptr_t)(b + line));
        fm_report_str(r, ": ");
        size_t end = line + 32 < n ? line + 32 : n;
        for (size_t i = line; i < end; i++) {
            report_digits(r, b[i], 16, 2);
            fm_report_str(r, " ");
        }
        for (size_t i = end; i < line + 32; i++)
            fm_report_str(r, "   ");
        char ascii[33];
        size_t k = 0;
        for (size_t i = line; i < end; i++)
            ascii[k++] = (b[i] > 32 && b[i] < 127) ? (char)b[i] : '.';
        ascii[k] = '\0';
        fm_report_str(r, ascii);
    }
}

/* UTC date and time from the epoch seconds, without localtime (which may allocate). */
static void report_timestamp(fm_report_t *r)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t days = ts.tv_sec / 86400, secs = ts.tv_sec % 86400;
    /* civil-from-days (Howard Hinnant's algorithm) */
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097, yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = yoe + era * 400, doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1, m = mp < 10 ? mp + 3 : mp - 9;
    report_digits(r, (uint64_t)(y + (m <= 2)), 10, 4);
    fm_report_str(r, "-");
    report_digits(r, (uint64_t)m, 10, 2);
    fm_report_str(r, "-");
    report_digits(r, (uint64_t)d, 10, 2);
    fm_report_str(r, " ");
    report_digits(r, (uint64_t)(secs / 3600), 10, 2);
    fm_report_str(r, ":");
    report_digits(r, (uint64_t)(secs / 60 % 60), 10, 2);
    fm_report_str(r, ":");
    report_digits(r, (uint64_t)(secs % 60), 10, 2);
    fm_report_str(r, ".");
    report_digits(r, (uint64_t)(ts.tv_nsec / 1000000), 10, 3);
    fm_report_str(r, " UTC");
}

void fm_report_begin(fm_report_t *r)
{
    fm_lock_wait(&report_lock);
    r->buf = report_buffer;
    r->cap = sizeof report_buffer;
    r->len = 0;
    r->buf[0] = '\0';
    fm_report_str(r, "--------------------------------libfastmm5 ");
    report_timestamp(r);
    fm_report_str(r, "--------------------------------\n");
}

void fm_report_end(fm_report_t *r)
{
    (void)r;
    fm_lock_release(&report_lock);
}

/* The exit check (init.c) reports and never aborts: the program has finished, and an abort in a
 * library destructor would lose the output still in its stdio buffers. */
static bool at_exit;
/* Set under the report lock by fm_event_raise_fault: the caller dies of the signal instead. */
static bool raising_fault;

void fm_event_raise(fastmm_event_type_t type, const void *block, size_t size, uint32_t allocation_number,
                    fm_report_t *r)
{
    fm_event_raise_leak(type, block, size, allocation_number, FASTMM_LEAK_NONE, 0, false, r);
}

bool fm_event_log_enabled(void) { return fm_load_relaxed(&log_enabled); }

void fm_event_set_leak_fd(int fd) { fm_store_relaxed(&leak_fd, fd); }

void fm_event_raise_leak(fastmm_event_type_t type, const void *block, size_t size, uint32_t allocation_number,
                         fastmm_leak_kind_t kind, size_t blocks, bool log_only, fm_report_t *r)
{
    fm_report_str(r, "\n");
    bool leak = type == FASTMM_EVENT_LEAK_DETAIL || type == FASTMM_EVENT_LEAK_SUMMARY;
    if (!log_only)
        fm_os_write_all(leak ? fm_load_relaxed(&leak_fd) : 2, r->buf, r->len);
    if (log_enabled) {
        int fd = fm_os_open_append(log_path);
        if (fd >= 0) {
            fm_os_write_all(fd, r->buf, r->len);
            fm_os_close(fd);
        }
    }
    fastmm_event_t event = {type, block, size, allocation_number, r->buf, kind, blocks};
    fastmm_event_handler_t h = fm_load_acquire(&handler);
    if (h != NULL)
        h(&event, fm_load_relaxed(&handler_user));
    if (fm_load_relaxed(&error_action) == FASTMM_ON_ERROR_ABORT &&
        type != FASTMM_EVENT_LEAK_DETAIL && type != FASTMM_EVENT_LEAK_SUMMARY) {
        if (!fm_load_relaxed(&at_exit) && !raising_fault) {
            static const char msg[] =
                "libfastmm5: aborting (set FASTMM5_ON_ERROR=continue to refuse the call instead)\n";
            fm_os_write_all(2, msg, sizeof msg - 1);
            abort();
        }
    }
    raising_fault = false;
    fm_lock_release(&report_lock);
}

void fm_event_raise_fault(fastmm_event_type_t type, const void *block, size_t size, fm_report_t *r)
{
    raising_fault = true;
    fm_event_raise(type, block, size, 0, r);
}

void fm_event_freed_block_damaged(const char *operation, const void *p, unsigned flags)
{
    fm_report_t r;
    fm_report_begin(&r);
    fm_report_str(&r, "libfastmm5: header corruption found by ");
    fm_report_str(&r, operation);
    fm_report_str(&r, "(): the freed block ");
    fm_report_hex(&r, (uintptr_t)p);
    fm_report_str(&r, " has a damaged header (flag word ");
    fm_report_hex(&r, flags);
    fm_report_str(&r, ").\nSomething wrote just before the block, or past the end of the block below it, while it "
                      "was free. The block is kept out of use.\nThread: ");
    fm_report_dec(&r, fm_os_thread_id());
    fm_report_str(&r, ".");
    fm_event_raise(FASTMM_EVENT_HEADER_CORRUPTION, p, 0, 0, &r);
}

void fm_event_exit_check(bool on) { fm_store_relaxed(&at_exit, on); }

void fm_event_invalid_pointer(const char *operation, const void *p, const char *why)
{
    fm_stack_current_t current;
    fm_stack_capture_current(&current);
    fm_report_t r;
    fm_report_begin(&r);
    fm_report_str(&r, "libfastmm5: invalid pointer passed to ");
    fm_report_str(&r, operation);
    fm_report_str(&r, "(): ");
    fm_report_hex(&r, (uintptr_t)p);
    fm_report_str(&r, "\nThe pointer is not a live block of this heap: ");
    fm_report_str(&r, why);
    fm_report_str(&r, ".\nThread: ");
    fm_report_dec(&r, fm_os_thread_id());
    fm_report_str(&r, ". The operation was refused; the heap is unchanged.");
    fm_stack_report_current(&r, &current);
    fm_event_raise(FASTMM_EVENT_INVALID_POINTER, p, 0, 0, &r);
}

bool fm_event_set_log_path(const char *path)
{
    if (path == NULL || path[0] == '\0') {
        fm_store_relaxed(&log_enabled, false);
        return true;
    }
    size_t n = 0;
    while (path[n] != '\0')
        n++;
    if (n >= sizeof log_path)
        return false;
    int fd = fm_os_open_append(path);
    if (fd < 0)
        return false;
    fm_os_close(fd);
    fm_lock_wait(&report_lock);
    for (size_t i = 0; i <= n; i++)
        log_path[i] = path[i];
    log_enabled = true;
    fm_lock_release(&report_lock);
    return true;
}

/* the fork handlers (init.c) run these in every process that forks: FM_EVERY_PROCESS */
FM_EVERY_PROCESS void fm_event_lock(void) { fm_lock_wait(&report_lock); }
FM_EVERY_PROCESS void fm_event_unlock(void) { fm_lock_release(&report_lock); }

/* ---- public API (section 3) ---- */

FM_EXPORT void fastmm_set_event_handler(fastmm_event_handler_t h, void *user)
{
    fm_store_relaxed(&handler_user, user);
    fm_store_release(&handler, h);
}

FM_EXPORT bool fastmm_set_event_log(const char *path) { return fm_event_set_log_path(path); }

FM_EXPORT void fastmm_set_error_action(fastmm_error_action_t action)
{
    fm_store_relaxed(&error_action, action == FASTMM_ON_ERROR_CONTINUE ? FASTMM_ON_ERROR_CONTINUE
                                                                       : FASTMM_ON_ERROR_ABORT);
}

FM_EXPORT fastmm_error_action_t fastmm_error_action(void) { return fm_load_relaxed(&error_action); }
