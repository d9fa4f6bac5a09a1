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
    fm_report_digits(r, (uint64_t)(y + (m <= 2)), 10, 4);
    fm_report_str(r, "-");
    fm_report_digits(r, (uint64_t)m, 10, 2);
    fm_report_str(r, "-");
    fm_report_digits(r, (uint64_t)d, 10, 2);
    fm_report_str(r, " ");
    fm_report_digits(r, (uint64_t)(secs / 3600), 10, 2);
    fm_report_str(r, ":");
    fm_report_digits(r, (uint64_t)(secs / 60 % 60), 10, 2);
    fm_report_str(r, ":");
    fm_report_digits(r, (uint64_t)(secs % 60), 10, 2);
    fm_report_str(r, ".");
    fm_report_digits(r, (uint64_t)(ts.tv_nsec / 1000000), 10, 3);
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

/* The one report of a plain block whose flag word was overwritten, in its two wordings: a freed
 * block the thread cache was about to hand out (kept out of use), or a live one an operation was
 * given (refused), with the bytes around the flag word. */
void fm_event_header_damaged(const char *operation, const void *p, unsigned flags, const char *live_kind,
                             size_t usable)
{
    fm_report_t r;
    fm_report_begin(&r);
    if (live_kind == NULL) {
        fm_report_str(&r, "libfastmm5: header corruption found by ");
        fm_report_str(&r, operation);
        fm_report_str(&r, "(): the freed block ");
        fm_report_hex(&r, (uintptr_t)p);
        fm_report_str(&r, " has a damaged header (flag word ");
        fm_report_hex(&r, flags);
        fm_report_str(&r, ").\nSomething wrote just before the block, or past the end of the block below it, "
                          "while it was free. The block is kept out of use.\nThread: ");
        fm_report_dec(&r, fm_os_thread_id());
        fm_report_str(&r, ".");
    } else {
        fm_report_str(&r, "libfastmm5: the block's header was overwritten (a write before the start of the block)");
        fm_report_str(&r, "\nDetected by: ");
        fm_report_str(&r, operation);
        fm_report_str(&r, ", thread ");
        fm_report_dec(&r, fm_os_thread_id());
        fm_report_str(&r, "\nBlock: ");
        fm_report_hex(&r, (uintptr_t)p);
        fm_report_str(&r, ", a ");
        fm_report_str(&r, live_kind);
        fm_report_str(&r, " block of ");
        fm_report_dec(&r, usable);
        fm_report_str(&r, " usable bytes; its flag word, the 2 bytes before it, is ");
        fm_report_hex(&r, flags);
        fm_report_str(&r, ". The operation was refused; the block stays allocated.");
        fm_report_str(&r, "\nCurrent memory dump of 32 bytes starting 16 bytes before the block:");
        fm_report_dump(&r, (const char *)p - 16, 32);
    }
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

/* ---- public API (fastmm5.h section 3) ---- */

FM_EXPORT void fastmm_set_event_handler(fastmm_event_handler_t h, void *user)
{
    fm_store_relaxed(&handler_user, user);
    fm_store_release(&handler, h);
    fm_defer_free_set_off(FM_DEFER_OFF_HANDLER, h != NULL);
}

FM_EXPORT bool fastmm_set_event_log(const char *path) { return fm_event_set_log_path(path); }

FM_EXPORT void fastmm_set_error_action(fastmm_error_action_t action)
{
    fm_store_relaxed(&error_action, action == FASTMM_ON_ERROR_CONTINUE ? FASTMM_ON_ERROR_CONTINUE
                                                                       : FASTMM_ON_ERROR_ABORT);
    fm_defer_free_set_off(FM_DEFER_OFF_CONTINUE, action == FASTMM_ON_ERROR_CONTINUE);
}

FM_EXPORT fastmm_error_action_t fastmm_error_action(void) { return fm_load_relaxed(&error_action); }
