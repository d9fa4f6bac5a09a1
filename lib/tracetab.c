/*
 * tracetab.c - the stack traces of debug blocks, each distinct one stored once: a block keeps
 * two 32-bit ids (allocation, free) in its footer instead of 2 x depth return addresses, as
 * Valgrind's ExeContexts and jemalloc's profiler keep theirs. A program allocates from a few
 * thousand places, again and again, so the table stays small while every block saves
 * 2 x depth x 8 bytes (320 at the default depth 20 on 64-bit).
 *
 * Entries: one header word (hash << 8 | depth) and `depth` return addresses (0 for unused
 * ones), appended to private chunks that are never moved or freed, so a pointer to an entry's
 * frames stays valid for the life of the process (the heap walk hands them out). An id is the
 * entry's word index: chunk * CHUNK_WORDS + offset; 0 is "no trace" (depth 0, or a capture
 * that found nothing) and FM_TRACE_LOST is what a block gets once the table is full.
 *
 * Lookup: an open-addressing hash table of ids (at most half full), read without a lock; a
 * trace not found takes the insert lock, looks again, appends the entry and publishes its id
 * with a release store. A full hash table is replaced by one twice its size under the lock; the
 * old one stays mapped, since a reader may still be probing it (a reader that misses there
 * looks again under the lock, in the new one). Nothing is allocated from this heap: chunks and
 * hash tables are mapped with mmap. The lock is held across fork (fm_tracetab_fork_lock).
 */
#include "internal.h"

#include <string.h>
#include <sys/mman.h>

#define CHUNK_WORDS 8192u                   /* 64 KiB of entries per mapping on 64-bit */
#define MAX_CHUNKS 4096u                    /* 256 MiB of entries at most (64-bit) */
#define MIN_SLOTS 1024u                     /* 4 KiB of slots until 512 traces */
#define MAX_SLOTS (1u << 21)                /* kept at most half full: 1M distinct traces */
#define DEPTH_MASK 0xffu

typedef struct hash_table {
    uint32_t mask;                          /* slots - 1 */
    uint32_t slot[];                        /* ids; 0 = empty */
} hash_table_t;

static fm_lock_t insert_lock;
static hash_table_t *table;                 /* the current one (release-published) */
static uintptr_t *chunks[MAX_CHUNKS];       /* .bss: touched only once debug mode captures */
static uint32_t chunk_count, chunk_used;    /* under insert_lock */
static uint32_t entry_count;                /* under insert_lock */

/* The ids this thread interned last: a program allocates and frees from the same few places in
 * turn, and comparing a capture with these entries costs less than hashing it. */
#define MEMO 4u
static __thread struct {
    uint32_t id[MEMO];
    unsigned next;
} memo __attribute__((tls_model("initial-exec")));

/* Set while this thread holds the insert lock: a signal handler that allocates on top of it
 * gets no trace stored rather than waiting for a lock its own thread holds. */
static __thread bool inserting __attribute__((tls_model("initial-exec")));

FM_STATIC_ASSERT((uint64_t)MAX_CHUNKS * CHUNK_WORDS < FM_TRACE_LOST, "every id fits below the sentinel");

static void *map_private(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/*
 * The frames are return addresses that share their high bits: a rotate and xor per word (no
 * multiply chain) spreads their low bits over the word, in two lanes that do not wait for each
 * other, and a final avalanche mixes the result. Collisions only cost a comparison of frames.
 * Also says whether any frame is non-zero.
 */
static uintptr_t hash_frames(const uintptr_t *frames, unsigned depth, bool *any)
{
    uint64_t a = depth, b = 0, or_all = 0;
    unsigned i = 0;
    for (; i + 2 <= depth; i += 2) {
        a = (a << 23 | a >> 41) ^ frames[i];
        b = (b << 29 | b >> 35) ^ frames[i + 1];
        or_all |= frames[i] | frames[i + 1];
    }
    if (i < depth) {
        a = (a << 23 | a >> 41) ^ frames[i];
        or_all |= frames[i];
    }
    uint64_t h = a ^ (b << 17 | b >> 47);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    *any = or_all != 0;
    return (uintptr_t)h;
}

FM_INLINE uintptr_t header_word(uintptr_t hash, unsigned depth) { return hash << 8 | depth; }

FM_INLINE const uintptr_t *entry_of(uint32_t id)
{
    const uintptr_t *chunk = fm_load_acquire(&chunks[id / CHUNK_WORDS]);
    return chunk + id % CHUNK_WORDS;
}

/* libc's memcmp compares a whole 20-frame trace in a few vector steps (a loop of word
 * compares was most of a lookup) */
FM_INLINE bool same_frames(const uintptr_t *a, const uintptr_t *b, unsigned depth)
{
    return memcmp(a, b, depth * sizeof(uintptr_t)) == 0;
}

/* The id of the entry in t equal to (head, frames), or 0; *end: the empty slot that ended the
 * probe (where an insert goes). */
static uint32_t probe(const hash_table_t *t, uintptr_t head, const uintptr_t *frames, unsigned depth, uint32_t *end)
{
    for (uint32_t i = (uint32_t)(head >> 8) & t->mask;; i = (i + 1) & t->mask) {
        uint32_t id = fm_load_acquire(&t->slot[i]);
        if (id == 0) {
            *end = i;
            return 0;
        }
        const uintptr_t *e = entry_of(id);
        if (e[0] == head && same_frames(e + 1, frames, depth))
            return id;
    }
}

static hash_table_t *new_table(uint32_t slots)
{
    return map_private(sizeof(hash_table_t) + (size_t)slots * sizeof(uint32_t));
}

/* Under the lock: a table twice the size of t with all of t's ids; NULL if none can be had. */
static hash_table_t *grow(hash_table_t *t)
{
    uint32_t slots = t == NULL ? MIN_SLOTS : (t->mask + 1) * 2;
    if (slots > MAX_SLOTS)
        return NULL;
    hash_table_t *n = new_table(slots);
    if (n == NULL)
        return NULL;
    n->mask = slots - 1;
    for (uint32_t i = 0; t != NULL && i <= t->mask; i++) {
        uint32_t id = t->slot[i];
        if (id == 0)
            continue;
        uint32_t j = (uint32_t)(entry_of(id)[0] >> 8) & n->mask;
        while (n->slot[j] != 0)
            j = (j + 1) & n->mask;
        n->slot[j] = id;
    }
    fm_store_release(&table, n);
    return n;
}

/* Under the lock: room for `words` more words of entries; the id of the first, or 0. */
static uint32_t reserve(unsigned words)
{
    if (chunk_count == 0 || chunk_used + words > CHUNK_WORDS) {
        if (chunk_count == MAX_CHUNKS)
            return 0;
        uintptr_t *c = map_private(CHUNK_WORDS * sizeof(uintptr_t));
        if (c == NULL)
            return 0;
        fm_store_release(&chunks[chunk_count], c);
        chunk_used = chunk_count == 0 ? 1 : 0; /* id 0 is "no trace": word 0 stays unused */
        chunk_count++;
    }
    uint32_t id = (chunk_count - 1) * CHUNK_WORDS + chunk_used;
    chunk_used += words;
    return id;
}

static FM_NOINLINE uint32_t insert(uintptr_t head, const uintptr_t *frames, unsigned depth)
{
    if (inserting)
        return FM_TRACE_NONE;
    inserting = true;
    fm_lock_wait(&insert_lock);
    hash_table_t *t = fm_load_relaxed(&table);
    uint32_t end = 0, id = t != NULL ? probe(t, head, frames, depth, &end) : 0;
    if (id == 0) {
        if (t == NULL || (entry_count + 1) * 2 > t->mask + 1) {
            t = grow(t);
            if (t != NULL)
                (void)probe(t, head, frames, depth, &end);
        }
        id = t != NULL ? reserve(1 + depth) : 0;
        if (id == 0) {
            id = FM_TRACE_LOST;
        } else {
            uintptr_t *e = (uintptr_t *)entry_of(id);
            e[0] = head;
            for (unsigned i = 0; i < depth; i++)
                e[1 + i] = frames[i];
            entry_count++;
            fm_store_release(&t->slot[end], id);
        }
    }
    fm_lock_release(&insert_lock);
    inserting = false;
    return id;
}

uint32_t fm_tracetab_intern(const uintptr_t *frames, unsigned depth)
{
    for (unsigned i = 0; i < MEMO; i++) {
        uint32_t id = memo.id[i];
        if (id == 0)
            continue;
        const uintptr_t *e = entry_of(id);
        if ((e[0] & DEPTH_MASK) == depth && same_frames(e + 1, frames, depth))
            return id;
    }
    bool any;
    uintptr_t head = header_word(hash_frames(frames, depth, &any), depth);
    if (!any)
        return FM_TRACE_NONE;
    const hash_table_t *t = fm_load_acquire(&table);
    uint32_t end;
    uint32_t id = t != NULL ? probe(t, head, frames, depth, &end) : 0;
    if (id == 0)
        id = insert(head, frames, depth);
    if (id != FM_TRACE_LOST && id != FM_TRACE_NONE)
        memo.id[memo.next++ % MEMO] = id;
    return id;
}

/* For the reports and the walk, from an id read out of a block whose footer may be damaged:
 * only an id that names an entry of that depth, whose hash matches its frames, is trusted. */
const uintptr_t *fm_tracetab_frames(uint32_t id, unsigned depth)
{
    if (id == FM_TRACE_NONE || id == FM_TRACE_LOST || id / CHUNK_WORDS >= MAX_CHUNKS ||
        id % CHUNK_WORDS + 1 + depth > CHUNK_WORDS || fm_load_acquire(&chunks[id / CHUNK_WORDS]) == NULL)
        return NULL;
    const uintptr_t *e = entry_of(id);
    bool any;
    if ((e[0] & DEPTH_MASK) != depth || e[0] != header_word(hash_frames(e + 1, depth, &any), depth))
        return NULL;
    return e + 1;
}

/* fork: taken last by the debug fork handler; no other lock is taken while it is held. */
FM_EVERY_PROCESS void fm_tracetab_fork_lock(void) { fm_lock_wait(&insert_lock); }
FM_EVERY_PROCESS void fm_tracetab_fork_unlock(void) { fm_lock_release(&insert_lock); }
