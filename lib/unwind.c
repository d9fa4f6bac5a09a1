/*
 * unwind.c - the stack-trace capture of x86-64: a walk of the stack with one unwind rule per
 * return address, each read once from the object's .eh_frame and then kept in a table.
 *
 * libgcc's _Unwind_Backtrace interprets an FDE's call-frame instructions again at every frame of
 * every trace. But nearly every x86-64 frame's rule is one of two shapes: CFA = rsp + k or
 * CFA = rbp + k, the return address at CFA - 8, and rbp either untouched or saved at CFA - 8n.
 * Such a rule fits in 17 bits, so the table maps a code address to its rule in one 64-bit word
 * (address in the low 47 bits: user space on x86-64), read and written atomically without a
 * lock, in memory of its own (mmap: never from this heap). A frame whose rule has any other
 * shape (a signal frame, a DWARF expression, a realigned stack, no unwind table) makes the rest
 * of the trace come from libgcc's unwinder, which knows them all.
 *
 * Robustness: every stack read lies inside the thread's stack mapping (found once per thread in
 * /proc/self/maps with plain system calls), the CFA must grow from frame to frame, and a walk
 * takes at most WALK_LIMIT steps. The table is emptied when dl_iterate_phdr's count of removed
 * objects moves (a dlclose: its code addresses may be reused by the next dlopen).
 * Nothing here takes a lock, so a child of fork inherits a usable table.
 */
#define _GNU_SOURCE 1 /* dl_iterate_phdr */
#include "internal.h"

#if defined(__x86_64__) && defined(__linux__)

#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <string.h>
#include <unistd.h>
#include <unwind.h>

#define TABLE_BITS 14
#define TABLE_SLOTS (1u << TABLE_BITS)
#define PROBES 8
#define WALK_LIMIT 256
#define PC_BITS 47
#define PC_MASK (((uint64_t)1 << PC_BITS) - 1)

/* A rule: kind (2 bits), where rbp was saved (5 bits: CFA - 8n, 0 = not saved), k / 8 (10 bits). */
enum { RULE_END = 0, RULE_RSP = 1, RULE_RBP = 2, RULE_OTHER = 3 };
#define RULE(kind, slot, k8) ((uint32_t)(kind) | (uint32_t)(slot) << 2 | (uint32_t)(k8) << 7)
#define RULE_KIND(r) ((r)&3u)
#define RULE_SLOT(r) (((r) >> 2) & 31u)
#define RULE_K(r) ((uintptr_t)((r) >> 7) * 8u)

static uint64_t *table;
static unsigned long seen_subs; /* dl_iterate_phdr's unload count when the table was last emptied */

/* The unload epoch: moves at every unload this file hears of, from the table's check or from
 * fm_unwind_note_unload (the library's dlclose, lib/dlclose.c). The recent rules and the
 * replays are kept under one epoch. While told_of_unloads is set (the program's dlclose is the
 * library's), a replay trusts the epoch instead of asking the loader: an object unloaded by the
 * C library itself, never through dlclose (iconv's modules), is noticed at the next walk that
 * is not a replay, in any thread. */
static unsigned long epoch;
static bool told_of_unloads;

/*
 * dl_iterate_phdr holds the dynamic loader's lock while it runs, and a child of fork inherits
 * that lock as it was: held forever if another thread was inside at the fork. (libgcc's
 * unwinder uses _dl_find_object, which takes no lock.) So the fork handler (lib/init.c) raises
 * fork_pending and waits until no walk is inside; a walk that finds it raised skips the call:
 * no unload check for that trace, and a frame whose rule it would have to read goes to libgcc.
 * Dekker's order on both sides: announce (inside, or pending), then look at the other.
 */
static unsigned inside_loader;
static bool fork_pending;

static bool loader_enter(void)
{
    __atomic_add_fetch(&inside_loader, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&fork_pending, __ATOMIC_SEQ_CST))
        return true;
    __atomic_sub_fetch(&inside_loader, 1, __ATOMIC_SEQ_CST);
    return false;
}

static void loader_leave(void) { __atomic_sub_fetch(&inside_loader, 1, __ATOMIC_SEQ_CST); }

FM_EVERY_PROCESS void fm_unwind_fork_prepare(void)
{
    __atomic_store_n(&fork_pending, true, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&inside_loader, __ATOMIC_SEQ_CST) != 0)
        fm_os_yield();
}

FM_EVERY_PROCESS void fm_unwind_fork_done(void) { __atomic_store_n(&fork_pending, false, __ATOMIC_SEQ_CST); }

static __thread struct {
    uintptr_t lo, hi; /* the mapping that holds this thread's stack */
} stack_range __attribute__((tls_model("initial-exec")));

/*
 * What a thread keeps of its own walks, in a page of its own (mapped at its first capture,
 * unmapped at its exit: thread-local storage stays small, as a preloaded library's must).
 *
 * recent: the rules of the last two walks, frame by frame, in the table's format. A program
 * allocates and frees from the same places again and again, so the next walk mostly meets the
 * same code addresses at the same depths, and reads their rules from here, in order, instead of
 * from scattered table slots. Two, because allocations and frees alternate and their walks
 * differ: through the library (their own frames, a different number of them, shift every frame
 * below) and at the call. A walk writes the set it was given and also looks in the other one.
 *
 * replay: whole walks, each as the list of stack words it read (where, relative to the stack
 * pointer it started from, and what it found) and the frames it returned. A walk is a
 * function of its starting registers, the words it reads and the rules of the addresses it
 * meets; so a capture that starts at a recorded stack pointer (and base pointer, where the walk
 * used the one it started with), under the same unload epoch, and finds every recorded word
 * unchanged, would repeat the recorded walk exactly: it returns the recorded frames after one
 * load and compare per word, with no rule to look up and no bound to check (the recorded reads
 * all passed them). A loop that allocates from one place captures this way every time after
 * the first. Each recording gets a new stamp, which the caller may use to name its result
 * (lib/debug.c keeps the trace id of the last stamps it saw).
 */
#define RECENT 32
#define REPLAYS 4
#define REPLAY_READS 64
#define UNUSED_BP 1u  /* in replay_t.at while recording: a saved rbp no rule has used yet */
typedef struct replay {
    uintptr_t sp, bp, stack_hi;   /* where the recorded walk started; the stack it stayed in */
    uintptr_t own_lo, own_hi;     /* the frames it left out */
    unsigned long epoch;          /* the unload epoch its rules were read under */
    uint64_t stamp;               /* names its result; 0: no walk recorded here */
    unsigned max, reads, frames;
    bool bp_used;                 /* a rule used the starting base pointer */
    uint32_t at[REPLAY_READS];    /* each stack read: its offset from sp */
    uintptr_t value[REPLAY_READS];
    uintptr_t frame[REPLAY_READS]; /* what the walk returned */
} replay_t;

typedef struct walk_memory {
    uint64_t recent[2][RECENT];
    unsigned long recent_epoch;   /* the unload epoch the recent rules were read under */
    unsigned recent_next;         /* the set the next walk writes */
    unsigned replay_next;         /* the record the next new walk replaces */
    unsigned handed_out;          /* the record whose frames the last replay handed out */
    uint64_t stamps;              /* the last stamp handed out */
    replay_t replay[REPLAYS];
} walk_memory_t;

#define MEMORY_BYTES ((sizeof(walk_memory_t) + 4095u) & ~(size_t)4095u)
#define MEMORY_GONE ((walk_memory_t *)1) /* the thread is exiting: walk without */

static __thread walk_memory_t *memory __attribute__((tls_model("initial-exec")));
static pthread_key_t memory_key;
static pthread_once_t memory_key_once = PTHREAD_ONCE_INIT;
static bool memory_key_made;

static void memory_at_exit(void *m)
{
    memory = MEMORY_GONE;
    munmap(m, MEMORY_BYTES);
}

/* pthread_key_create allocates nothing; made at the first capture, so that a process without
 * debug mode's traces has no key of this library's besides the thread caches'. */
static void make_memory_key(void)
{
    if (pthread_key_create(&memory_key, memory_at_exit) == 0)
        fm_store_release(&memory_key_made, true);
}

/* This thread's walk memory, mapped on first use; NULL if there is none. */
static walk_memory_t *walk_memory(void)
{
    walk_memory_t *m = memory;
    if (FM_LIKELY(m != NULL))
        return m == MEMORY_GONE ? NULL : m;
    pthread_once(&memory_key_once, make_memory_key);
    if (!fm_load_acquire(&memory_key_made)) {
        memory = MEMORY_GONE; /* walk without */
        return NULL;
    }
    void *p = mmap(NULL, MEMORY_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL; /* tried again at the next capture */
    if (pthread_setspecific(memory_key, p) != 0) {
        munmap(p, MEMORY_BYTES);
        memory = MEMORY_GONE;
        return NULL;
    }
    memory = p;
    return p;
}

/* ---- .eh_frame reading ---- */

enum {
    PE_OMIT = 0xff,
    PE_ABSPTR = 0x00, PE_ULEB128 = 0x01, PE_UDATA2 = 0x02, PE_UDATA4 = 0x03, PE_UDATA8 = 0x04,
    PE_SLEB128 = 0x09, PE_SDATA2 = 0x0a, PE_SDATA4 = 0x0b, PE_SDATA8 = 0x0c,
    PE_PCREL = 0x10, PE_DATAREL = 0x30, PE_INDIRECT = 0x80,
};

typedef struct reader {
    const uint8_t *p, *end;
    bool bad;
} reader_t;

static uint8_t read_u8(reader_t *r)
{
    if (r->p >= r->end) {
        r->bad = true;
        return 0;
    }
    return *r->p++;
}

static uint64_t read_fixed(reader_t *r, unsigned bytes)
{
    if ((size_t)(r->end - r->p) < bytes) {
        r->bad = true;
        r->p = r->end;
        return 0;
    }
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += bytes;
    return v;
}

static uint64_t read_uleb(reader_t *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        uint8_t b = read_u8(r);
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80) || r->bad)
            return v;
    }
}

static int64_t read_sleb(reader_t *r)
{
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t b;
    do {
        b = read_u8(r);
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    } while ((b & 0x80) && !r->bad);
    if (shift < 64 && (b & 0x40))
        v |= ~(uint64_t)0 << shift;
    return (int64_t)v;
}

/* A pointer in one of the encodings GNU tools write; indirect ones are refused. */
static uintptr_t read_encoded(reader_t *r, uint8_t enc, uintptr_t datarel)
{
    uintptr_t at = (uintptr_t)r->p, v;
    switch (enc & 0x0f) {
    case PE_ABSPTR: v = (uintptr_t)read_fixed(r, 8); break;
    case PE_ULEB128: v = (uintptr_t)read_uleb(r); break;
    case PE_UDATA2: v = (uintptr_t)read_fixed(r, 2); break;
    case PE_UDATA4: v = (uintptr_t)read_fixed(r, 4); break;
    case PE_UDATA8: v = (uintptr_t)read_fixed(r, 8); break;
    case PE_SLEB128: v = (uintptr_t)read_sleb(r); break;
    case PE_SDATA2: v = (uintptr_t)(int16_t)read_fixed(r, 2); break;
    case PE_SDATA4: v = (uintptr_t)(int32_t)read_fixed(r, 4); break;
    case PE_SDATA8: v = (uintptr_t)read_fixed(r, 8); break;
    default: r->bad = true; return 0;
    }
    switch (enc & 0x70) {
    case 0: break;
    case PE_PCREL: v += at; break;
    case PE_DATAREL: v += datarel; break;
    default: r->bad = true; return 0;
    }
    if (enc & PE_INDIRECT)
        r->bad = true;
    return v;
}

/* What the call-frame instructions say at one address, for the registers a walk needs. */
enum { HOW_SAME, HOW_OFFSET, HOW_UNDEFINED, HOW_OTHER };
typedef struct row {
    uint8_t cfa_reg, bp_how, ra_how;
    bool cfa_other; /* a DWARF expression, or a register a walk does not follow */
    int64_t cfa_off, bp_off, ra_off;
} row_t;

#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16

static void set_reg(row_t *row, uint64_t reg, uint8_t how, int64_t off)
{
    if (reg == REG_RBP) {
        row->bp_how = how;
        row->bp_off = off;
    } else if (reg == REG_RA) {
        row->ra_how = how;
        row->ra_off = off;
    }
}

/* Runs instructions [r) until the location passes pc. initial: the row after the CIE's (for
 * DW_CFA_restore), NULL while running the CIE's own. False on anything not understood. */
static bool run_cfi(reader_t *r, row_t *row, const row_t *initial, uintptr_t loc, uintptr_t pc, uint64_t code_align,
                    int64_t data_align, uint8_t fde_enc)
{
    row_t saved[8];
    unsigned depth = 0;
    while (r->p < r->end && !r->bad) {
        uint8_t op = read_u8(r), low = op & 0x3f;
        uint64_t reg;
        switch (op >> 6) {
        case 1: /* advance_loc */
            loc += low * code_align;
            if (loc > pc)
                return true;
            continue;
        case 2: /* offset */
            set_reg(row, low, HOW_OFFSET, (int64_t)read_uleb(r) * data_align);
            continue;
        case 3: /* restore */
            if (initial == NULL)
                return false;
            if (low == REG_RBP)
                set_reg(row, low, initial->bp_how, initial->bp_off);
            else if (low == REG_RA)
                set_reg(row, low, initial->ra_how, initial->ra_off);
            continue;
        }
        switch (op) {
        case 0x00: break; /* nop */
        case 0x01: /* set_loc */
            loc = read_encoded(r, fde_enc, 0);
            if (loc > pc)
                return true;
            break;
        case 0x02: loc += read_fixed(r, 1) * code_align; if (loc > pc) return true; break;
        case 0x03: loc += read_fixed(r, 2) * code_align; if (loc > pc) return true; break;
        case 0x04: loc += read_fixed(r, 4) * code_align; if (loc > pc) return true; break;
        case 0x05: /* offset_extended */
            reg = read_uleb(r);
            set_reg(row, reg, HOW_OFFSET, (int64_t)read_uleb(r) * data_align);
            break;
        case 0x06: /* restore_extended */
            reg = read_uleb(r);
            if (initial == NULL)
                return false;
            if (reg == REG_RBP)
                set_reg(row, reg, initial->bp_how, initial->bp_off);
            else if (reg == REG_RA)
                set_reg(row, reg, initial->ra_how, initial->ra_off);
            break;
        case 0x07: set_reg(row, read_uleb(r), HOW_UNDEFINED, 0); break;
        case 0x08: set_reg(row, read_uleb(r), HOW_SAME, 0); break;
        case 0x09: /* register */
            reg = read_uleb(r);
            (void)read_uleb(r);
            set_reg(row, reg, HOW_OTHER, 0);
            break;
        case 0x0a: /* remember_state */
            if (depth == sizeof saved / sizeof saved[0])
                return false;
            saved[depth++] = *row;
            break;
        case 0x0b: /* restore_state: the CFA rule too, as GCC's epilogues expect (and libgcc does) */
            if (depth == 0)
                return false;
            *row = saved[--depth];
            break;
        case 0x0c: /* def_cfa */
            row->cfa_reg = (uint8_t)read_uleb(r);
            row->cfa_off = (int64_t)read_uleb(r);
            row->cfa_other = false;
            break;
        case 0x0d: row->cfa_reg = (uint8_t)read_uleb(r); break;
        case 0x0e: row->cfa_off = (int64_t)read_uleb(r); break;
        case 0x0f: /* def_cfa_expression */
            r->p += read_uleb(r);
            row->cfa_other = true;
            break;
        case 0x10: /* expression */
        case 0x16: /* val_expression */
            reg = read_uleb(r);
            r->p += read_uleb(r);
            set_reg(row, reg, HOW_OTHER, 0);
            break;
        case 0x11: /* offset_extended_sf */
            reg = read_uleb(r);
            set_reg(row, reg, HOW_OFFSET, read_sleb(r) * data_align);
            break;
        case 0x12: /* def_cfa_sf */
            row->cfa_reg = (uint8_t)read_uleb(r);
            row->cfa_off = read_sleb(r) * data_align;
            row->cfa_other = false;
            break;
        case 0x13: row->cfa_off = read_sleb(r) * data_align; break;
        case 0x14: /* val_offset */
        case 0x15: /* val_offset_sf */
            reg = read_uleb(r);
            if (op == 0x14)
                (void)read_uleb(r);
            else
                (void)read_sleb(r);
            set_reg(row, reg, HOW_OTHER, 0);
            break;
        case 0x2e: (void)read_uleb(r); break; /* GNU_args_size */
        case 0x2f: /* GNU_negative_offset_extended */
            reg = read_uleb(r);
            set_reg(row, reg, HOW_OFFSET, -(int64_t)read_uleb(r) * data_align);
            break;
        default:
            return false;
        }
        if (r->p > r->end)
            return false;
    }
    return !r->bad;
}

typedef struct object_tables {
    uintptr_t pc;
    const uint8_t *hdr; /* the object's .eh_frame_hdr, or NULL */
} object_tables_t;

static int find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    object_tables_t *o = arg;
    const ElfW(Phdr) *eh = NULL;
    bool inside = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_GNU_EH_FRAME)
            eh = ph;
        else if (ph->p_type == PT_LOAD && o->pc - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz)
            inside = true;
    }
    if (!inside)
        return 0;
    o->hdr = eh != NULL ? (const uint8_t *)(info->dlpi_addr + eh->p_vaddr) : NULL;
    return 1;
}

/* The rule at pc, read from its object's unwind tables; RULE_UNKNOWN while a fork is pending. */
#define RULE_UNKNOWN UINT32_MAX
static uint32_t compute_rule(uintptr_t pc)
{
    object_tables_t o = {pc, NULL};
    if (!loader_enter())
        return RULE_UNKNOWN;
    int found = dl_iterate_phdr(find_object, &o);
    loader_leave();
    if (found == 0 || o.hdr == NULL)
        return RULE_OTHER;
    const uint8_t *hdr = o.hdr;
    /* version 1; the binary-search table as GNU ld writes it: 4-byte count, then pairs of
     * 4-byte offsets from the header (initial location, FDE) sorted by location */
    if (hdr[0] != 1 || hdr[3] != (PE_DATAREL | PE_SDATA4))
        return RULE_OTHER;
    reader_t r = {hdr + 4, hdr + 4 + 16, false};
    (void)read_encoded(&r, hdr[1], (uintptr_t)hdr);
    uintptr_t count = read_encoded(&r, hdr[2], (uintptr_t)hdr);
    if (r.bad || count == 0)
        return RULE_OTHER;
    const int32_t *entries = (const int32_t *)(const void *)r.p;
    size_t lo = 0, hi = count;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)hdr + (intptr_t)entries[2 * mid] <= pc)
            lo = mid;
        else
            hi = mid;
    }
    if ((uintptr_t)hdr + (intptr_t)entries[2 * lo] > pc)
        return RULE_OTHER;
    const uint8_t *fde = hdr + entries[2 * lo + 1];

    /* the FDE: length, CIE pointer, location range, augmentation data, instructions */
    uint32_t fde_len = (uint32_t)read_fixed(&(reader_t){fde, fde + 4, false}, 4);
    if (fde_len == 0 || fde_len == 0xffffffffu)
        return RULE_OTHER;
    reader_t f = {fde + 4, fde + 4 + fde_len, false};
    uint32_t cie_off = (uint32_t)read_fixed(&f, 4);
    const uint8_t *cie = fde + 4 - cie_off;

    uint32_t cie_len = (uint32_t)read_fixed(&(reader_t){cie, cie + 4, false}, 4);
    if (cie_len == 0 || cie_len == 0xffffffffu)
        return RULE_OTHER;
    reader_t c = {cie + 4, cie + 4 + cie_len, false};
    if (read_fixed(&c, 4) != 0)
        return RULE_OTHER; /* not a CIE */
    uint8_t version = read_u8(&c);
    const char *aug = (const char *)c.p;
    while (read_u8(&c) != 0 && !c.bad)
        ;
    uint64_t code_align = read_uleb(&c);
    int64_t data_align = read_sleb(&c);
    uint64_t ra_reg = version == 1 ? read_u8(&c) : read_uleb(&c);
    uint8_t fde_enc = PE_ABSPTR;
    bool has_z = aug[0] == 'z';
    if (has_z) {
        uint64_t aug_len = read_uleb(&c);
        const uint8_t *aug_end = c.p + aug_len;
        for (const char *a = aug + 1; *a != '\0' && !c.bad; a++) {
            if (*a == 'R')
                fde_enc = read_u8(&c);
            else if (*a == 'L')
                (void)read_u8(&c);
            else if (*a == 'P') {
                uint8_t enc = read_u8(&c);
                (void)read_encoded(&c, enc & 0x7f, 0);
                c.bad = false; /* the personality routine is not needed */
            } else {
                return RULE_OTHER; /* 'S' (a signal frame), or unknown */
            }
        }
        c.p = aug_end;
    } else if (aug[0] != '\0') {
        return RULE_OTHER;
    }
    if (c.bad || ra_reg != REG_RA || c.p > c.end)
        return RULE_OTHER;

    uintptr_t start = read_encoded(&f, fde_enc, 0);
    uintptr_t range = read_encoded(&f, fde_enc & 0x0f, 0);
    if (f.bad || pc < start || pc - start >= range)
        return RULE_OTHER;
    if (has_z)
        f.p += read_uleb(&f);

    row_t row = {REG_RSP, HOW_SAME, HOW_OTHER, true, 0, 0, 0};
    if (!run_cfi(&c, &row, NULL, start, UINTPTR_MAX, code_align, data_align, fde_enc))
        return RULE_OTHER;
    row_t initial = row;
    if (!run_cfi(&f, &row, &initial, start, pc, code_align, data_align, fde_enc))
        return RULE_OTHER;

    if (row.ra_how == HOW_UNDEFINED)
        return RULE_END; /* the outermost frame (_start, clone) */
    if (row.cfa_other || (row.cfa_reg != REG_RSP && row.cfa_reg != REG_RBP))
        return RULE_OTHER;
    if (row.ra_how != HOW_OFFSET || row.ra_off != -8)
        return RULE_OTHER;
    if (row.cfa_off <= 0 || row.cfa_off % 8 != 0 || row.cfa_off / 8 >= 1024)
        return RULE_OTHER;
    unsigned slot = 0;
    if (row.bp_how == HOW_OFFSET) {
        if (row.bp_off >= 0 || row.bp_off % 8 != 0 || -row.bp_off / 8 >= 32)
            return RULE_OTHER;
        slot = (unsigned)(-row.bp_off / 8);
    } else if (row.bp_how != HOW_SAME) {
        return RULE_OTHER;
    }
    return RULE(row.cfa_reg == REG_RSP ? RULE_RSP : RULE_RBP, slot, row.cfa_off / 8);
}

/* ---- the table ---- */

static uint64_t *the_table(void)
{
    uint64_t *t = fm_load_acquire(&table);
    if (t != NULL)
        return t;
    /* its own mapping: nothing from this heap, and it survives whatever the heap suffers */
    void *m = mmap(NULL, TABLE_SLOTS * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uint64_t *expected = NULL;
    if (!__atomic_compare_exchange_n(&table, &expected, (uint64_t *)m, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        munmap(m, TABLE_SLOTS * sizeof(uint64_t));
        return expected;
    }
    return m;
}

static int read_subs(struct dl_phdr_info *info, size_t size, void *arg)
{
    *(unsigned long long *)arg = size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs
                                     ? info->dlpi_subs
                                     : 0;
    return 1; /* the counters are the same in every object's record */
}

/* Empties the table if an object was unloaded since the last look; returns the unload epoch
 * (the last one known while a fork is pending). */
static unsigned long forget_unloaded(uint64_t *t)
{
    unsigned long long subs = 0;
    if (!loader_enter())
        return fm_load_acquire(&epoch);
    dl_iterate_phdr(read_subs, &subs);
    loader_leave();
    if (subs != fm_load_relaxed(&seen_subs)) {
        for (unsigned i = 0; i < TABLE_SLOTS; i++)
            fm_store_relaxed(&t[i], 0);
        fm_store_relaxed(&seen_subs, (unsigned long)subs);
        __atomic_add_fetch(&epoch, 1, __ATOMIC_ACQ_REL);
    }
    return fm_load_acquire(&epoch);
}

/* Every process calls these (dlclose.c: at start-up, at each dlclose): kept with the hot code. */
FM_EVERY_PROCESS void fm_unwind_note_unload(void) { __atomic_add_fetch(&epoch, 1, __ATOMIC_ACQ_REL); }

FM_EVERY_PROCESS void fm_unwind_trust_unload_notes(bool trust) { fm_store_release(&told_of_unloads, trust); }

FM_INLINE unsigned slot_of(uintptr_t pc)
{
    uint64_t h = (uint64_t)pc * 0x9e3779b97f4a7c15ull;
    return (unsigned)(h >> (64 - TABLE_BITS));
}

/* A rule not in the table yet: read it and add it. */
__attribute__((noinline)) static uint32_t learn_rule(uint64_t *t, uintptr_t pc, unsigned s)
{
    uint32_t rule = compute_rule(pc);
    if (rule == RULE_UNKNOWN)
        return RULE_OTHER; /* not kept: libgcc's unwinder takes this trace over */
    uint64_t word = pc | (uint64_t)rule << PC_BITS;
    for (unsigned i = 0; i < PROBES; i++) {
        uint64_t expected = 0;
        if (__atomic_compare_exchange_n(&t[(s + i) & (TABLE_SLOTS - 1)], &expected, word, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            return rule;
    }
    fm_store_relaxed(&t[s], word); /* all probed slots taken: replace the first */
    return rule;
}

FM_INLINE uint32_t rule_at(uint64_t *t, uintptr_t pc)
{
    unsigned s = slot_of(pc);
    for (unsigned i = 0; i < PROBES; i++) {
        uint64_t w = fm_load_relaxed(&t[(s + i) & (TABLE_SLOTS - 1)]);
        if ((w & PC_MASK) == pc)
            return (uint32_t)(w >> PC_BITS);
        if (w == 0)
            break;
    }
    return learn_rule(t, pc, s);
}

/* ---- the thread's stack ---- */

static uintptr_t parse_hex(const char **p)
{
    uintptr_t v = 0;
    for (;; (*p)++) {
        char ch = **p;
        unsigned d = ch >= '0' && ch <= '9' ? (unsigned)(ch - '0') : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10) : 16u;
        if (d == 16)
            return v;
        v = v << 4 | d;
    }
}

/* The mapping of /proc/self/maps that holds sp; false if none is found. */
static bool find_stack(uintptr_t sp)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[4096];
    size_t have = 0;
    bool found = false;
    for (;;) {
        ssize_t got = read(fd, buf + have, sizeof buf - 1 - have);
        if (got <= 0)
            break;
        have += (size_t)got;
        buf[have] = '\0';
        char *line = buf, *nl;
        while ((nl = memchr(line, '\n', have - (size_t)(line - buf))) != NULL) {
            const char *q = line;
            uintptr_t lo = parse_hex(&q);
            uintptr_t hi = *q == '-' ? (q++, parse_hex(&q)) : 0;
            if (sp >= lo && sp < hi) {
                stack_range.lo = lo;
                stack_range.hi = hi;
                found = true;
                break;
            }
            line = nl + 1;
        }
        if (found)
            break;
        have -= (size_t)(line - buf);
        memmove(buf, line, have);
        if (have == sizeof buf - 1)
            have = 0; /* a line longer than the buffer: not an address line worth keeping */
    }
    close(fd);
    return found;
}

/* ---- the walk ---- */

/* libgcc's unwinder, recording from frame `from` on; frame from - 1 must be at `expect`.
 * Frame 0 is fm_unwind_capture itself for both unwinders (it calls _Unwind_Backtrace). */
typedef struct resume {
    uintptr_t *out;
    unsigned max, n;
    unsigned frame, from;
    uintptr_t expect;
    bool lost; /* frame from - 1 was not at `expect`: the two unwinders disagree */
    uintptr_t own_lo, own_hi;
} resume_t;

static _Unwind_Reason_Code resume_frame(struct _Unwind_Context *ctx, void *arg)
{
    resume_t *c = arg;
    uintptr_t ip = (uintptr_t)_Unwind_GetIP(ctx);
    unsigned frame = c->frame++;
    if (ip == 0)
        return _URC_END_OF_STACK;
    if (frame < c->from) {
        if (frame + 1 == c->from && frame != 0 && ip != c->expect) {
            c->lost = true;
            return _URC_END_OF_STACK;
        }
        return _URC_NO_REASON;
    }
    if (ip >= c->own_lo && ip < c->own_hi)
        return _URC_NO_REASON;
    c->out[c->n++] = ip;
    return c->n < c->max ? _URC_NO_REASON : _URC_END_OF_STACK;
}

/* The record of an earlier walk that this capture would repeat; NULL if none. */
static const replay_t *replayed(const walk_memory_t *m, unsigned max, uintptr_t sp, uintptr_t bp, uintptr_t own_lo,
                                uintptr_t own_hi, unsigned long now)
{
    for (unsigned i = 0; i < REPLAYS; i++) {
        const replay_t *r = &m->replay[i];
        if (r->sp != sp || r->stamp == 0 || r->max != max || r->epoch != now || r->stack_hi != stack_range.hi ||
            r->own_lo != own_lo || r->own_hi != own_hi || (r->bp_used && r->bp != bp))
            continue;
        /* every word compared before any verdict, in two lanes: no branch per word */
        uintptr_t differ = 0, differ2 = 0;
        unsigned j = 0, reads = r->reads;
        for (; j + 2 <= reads; j += 2) {
            differ |= *(const uintptr_t *)(sp + r->at[j]) ^ r->value[j];
            differ2 |= *(const uintptr_t *)(sp + r->at[j + 1]) ^ r->value[j + 1];
        }
        if (j < reads)
            differ |= *(const uintptr_t *)(sp + r->at[j]) ^ r->value[j];
        if ((differ | differ2) == 0)
            return r;
    }
    return NULL;
}

/* The record a new walk from sp goes to: the one it failed to repeat, or the next in turn but
 * never the one whose frames the last replay handed out (a signal handler that allocates could
 * otherwise record over them before the interrupted caller has read them). */
static replay_t *record_for(walk_memory_t *m, uintptr_t sp)
{
    for (unsigned i = 0; i < REPLAYS; i++)
        if (m->replay[i].sp == sp)
            return &m->replay[i];
    unsigned i = m->replay_next++ % REPLAYS;
    if (i == m->handed_out)
        i = m->replay_next++ % REPLAYS;
    return &m->replay[i];
}

/* The return addresses outside [own_lo, own_hi), the caller's first: at most max of them, in
 * out, or (*where says) in this thread's record of the walk that this one repeats, valid until
 * its next capture; returns how many. From the first frame it cannot unwind on, libgcc's
 * unwinder goes on. */
__attribute__((noinline)) unsigned fm_unwind_capture(uintptr_t *out, unsigned max, uintptr_t own_lo, uintptr_t own_hi,
                                                     uint64_t *stamp, const uintptr_t **where)
{
    uintptr_t ip, sp, bp;
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(ip), "=r"(sp), "=r"(bp));
    *stamp = 0;
    *where = out;
    resume_t c = {out, max, 0, 0, 0, 0, false, own_lo, own_hi};
    uint64_t *t = the_table();
    if (t == NULL || ((sp < stack_range.lo || sp >= stack_range.hi) && !find_stack(sp)))
        goto libgcc;
    walk_memory_t *m = walk_memory();
    bool trusted = fm_load_acquire(&told_of_unloads);
    unsigned long now = trusted ? fm_load_acquire(&epoch) : forget_unloaded(t);
    replay_t *rec = NULL;
    uint64_t *mine = NULL, *other = NULL;
    if (m != NULL) {
        const replay_t *r = replayed(m, max, sp, bp, own_lo, own_hi, now);
        if (r != NULL) {
            *stamp = r->stamp;
            *where = r->frame;
            m->handed_out = (unsigned)(r - m->replay);
            return r->frames;
        }
    }
    if (trusted)
        now = forget_unloaded(t); /* a walk asks the loader: the table may hold a gone object's rules */
    if (m != NULL) {
        if (m->recent_epoch != now) {
            memset(m->recent, 0, sizeof m->recent);
            m->recent_epoch = now;
        }
        mine = m->recent[m->recent_next];
        other = m->recent[m->recent_next ^ 1];
        m->recent_next ^= 1;
        rec = record_for(m, sp);
        rec->sp = sp;
        rec->bp = bp;
        rec->stack_hi = stack_range.hi;
        rec->own_lo = own_lo;
        rec->own_hi = own_hi;
        rec->epoch = now;
        rec->stamp = 0;
        rec->max = max;
        rec->bp_used = false;
    }
    unsigned reads = 0, bp_read = UINT32_MAX; /* the read bp's value came from */
    bool bp_from_start = true; /* bp still holds the register's value at the start */
    uintptr_t lo = sp, hi = stack_range.hi, sp0 = sp;
    uintptr_t pc = ip; /* the first frame's address is no return address: no - 1 */
    for (unsigned frame = 0; frame < WALK_LIMIT && c.n < max; frame++) {
        c.from = frame + 1; /* where libgcc would go on if this frame's rule is no simple one */
        c.expect = ip;
        if (pc > PC_MASK)
            goto resume;
        uint32_t rule;
        if (mine != NULL && frame < RECENT && (mine[frame] & PC_MASK) == pc) {
            rule = (uint32_t)(mine[frame] >> PC_BITS);
        } else if (mine != NULL && frame < RECENT && (other[frame] & PC_MASK) == pc) {
            rule = (uint32_t)(other[frame] >> PC_BITS);
            mine[frame] = other[frame];
        } else {
            rule = rule_at(t, pc);
            if (mine != NULL && frame < RECENT)
                mine[frame] = pc | (uint64_t)rule << PC_BITS;
        }
        if (RULE_KIND(rule) == RULE_END)
            break;
        if (RULE_KIND(rule) == RULE_OTHER)
            goto resume;
        if (RULE_KIND(rule) == RULE_RBP && rec != NULL) {
            if (bp_from_start)
                rec->bp_used = true;
            else if (bp_read < REPLAY_READS)
                rec->at[bp_read] &= ~UNUSED_BP; /* a replay must find this saved rbp too */
        }
        uintptr_t cfa = (RULE_KIND(rule) == RULE_RSP ? sp : bp) + RULE_K(rule);
        /* the CFA lies above this frame's stack pointer and inside the stack, with the return
         * address and the saved rbp below it */
        if (cfa <= sp || cfa < lo + 16 || cfa > hi || (cfa & 7) != 0)
            break;
        uintptr_t ra = *(const uintptr_t *)(cfa - 8);
        bool kept = ra >= 4096 && !(ra >= own_lo && ra < own_hi);
        if (reads < REPLAY_READS && rec != NULL) {
            rec->at[reads] = (uint32_t)(cfa - 8 - sp0);
            rec->value[reads] = ra;
        }
        reads++;
        if (RULE_SLOT(rule) != 0) {
            uintptr_t at = cfa - 8u * RULE_SLOT(rule);
            if (at < sp)
                break;
            bp = *(const uintptr_t *)at;
            bp_from_start = false;
            bp_read = reads;
            if (reads < REPLAY_READS && rec != NULL) {
                rec->at[reads] = (uint32_t)(at - sp0) | UNUSED_BP;
                rec->value[reads] = bp;
            }
            reads++;
        }
        sp = cfa;
        if (ra < 4096)
            break;
        ip = ra;
        pc = ra - 1; /* inside the call instruction: the rule of the call, not of what follows */
        if (kept)
            out[c.n++] = ip;
    }
    /* a walk whose reads all fit, over a stack smaller than 4 GiB, is kept for replay */
    if (rec != NULL && reads <= REPLAY_READS && c.n <= REPLAY_READS && hi - sp0 <= UINT32_MAX) {
        unsigned kept_reads = 0; /* a saved rbp no rule used does not decide the walk: not checked */
        for (unsigned i = 0; i < reads; i++) {
            if (rec->at[i] & UNUSED_BP)
                continue;
            rec->at[kept_reads] = rec->at[i];
            rec->value[kept_reads++] = rec->value[i];
        }
        rec->reads = kept_reads;
        rec->frames = c.n;
        memcpy(rec->frame, out, c.n * sizeof *out);
        rec->stamp = ++m->stamps;
        *stamp = rec->stamp;
    }
    return c.n;
resume:
    if (rec != NULL)
        rec->stamp = 0;
    _Unwind_Backtrace(resume_frame, &c);
    if (!c.lost)
        return c.n;
libgcc:
    c.n = 0;
    c.frame = 0;
    c.from = 0;
    c.lost = false;
    _Unwind_Backtrace(resume_frame, &c);
    return c.n;
}

#else

FM_EVERY_PROCESS void fm_unwind_note_unload(void) {}
FM_EVERY_PROCESS void fm_unwind_trust_unload_notes(bool trust) { (void)trust; }
FM_EVERY_PROCESS void fm_unwind_fork_prepare(void) {}
FM_EVERY_PROCESS void fm_unwind_fork_done(void) {}

#endif
