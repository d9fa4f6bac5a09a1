/*
 * report.c - the plain report writer: strings, numbers and byte dumps appended to a caller's
 * buffer, with hand-written number formatting. Nothing here allocates or takes a lock, so any
 * layer may format text with it; eventlog.c decides where a finished report goes.
 */
#include "internal.h"

void fm_report_str(fm_report_t *r, const char *s)
{
    while (*s != '\0' && r->len + 1 < r->cap)
        r->buf[r->len++] = *s++;
    r->buf[r->len] = '\0';
}

void fm_report_digits(fm_report_t *r, uint64_t v, unsigned base, unsigned min_digits)
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
    fm_report_digits(r, v, 16, 1);
}

void fm_report_dec(fm_report_t *r, uint64_t v) { fm_report_digits(r, v, 10, 1); }

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
            fm_report_digits(r, b[i], 16, 2);
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
