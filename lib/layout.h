/*
 * layout.h - block and span layouts, FastMM5's size geometry, and the inline decoders that read
 * them. Every structure that must not move has a static assertion saying why.
 *
 * The 16-bit flag word directly before every user pointer (FastMM5's, doc/fastmm5-facts.md 2.6):
 *
 *    bit  0  FREE        the block is free (or queued on a pending-free list)
 *    bit  1  DEBUG_INFO  the payload starts with a debug header (debug-mode block)
 *    bit  2  SMALL       small block: bits 3..15 hold (offset of the block in its span / 64)
 *    bit  3  MEDIUM      medium block (only when SMALL is clear)
 *    bit  4  LARGE       large block
 *    bit  5  DEBUG_BLOCK the word closes a debug header (the user pointer of a debug block)
 *
 * Read it with exactly a 16-bit load: the word can be the last two bytes of a mapping.
 */
#ifndef FM_LAYOUT_H
#define FM_LAYOUT_H

#include "base.h"
#include "sync.h"

#define FM_FLAG_FREE 0x01u
#define FM_FLAG_DEBUG_INFO 0x02u
#define FM_FLAG_SMALL 0x04u
#define FM_FLAG_MEDIUM 0x08u
#define FM_FLAG_LARGE 0x10u
#define FM_FLAG_DEBUG_BLOCK 0x20u
#define FM_SMALL_OFFSET_MASK 0xfff8u
/* The low bits of a small block's flag word, and their value while a plain block is free. */
#define FM_SMALL_STATE_MASK (FM_FLAG_FREE | FM_FLAG_DEBUG_INFO | FM_FLAG_SMALL)
#define FM_SMALL_FREE_STATE (FM_FLAG_FREE | FM_FLAG_SMALL)

FM_INLINE uint16_t *fm_flags_of(const void *p) { return (uint16_t *)((uintptr_t)p - 2); }

/* A flag word is read and written by threads that hold no common lock (free marks it with a
 * compare-and-swap, the walker and the debug scan read it under arena locks the owner does not
 * take), so every access is a relaxed atomic: a plain 16-bit move on x86 and ARM, and no data
 * race for ThreadSanitizer. */
FM_INLINE uint16_t fm_flags_get(const void *p) { return fm_load_relaxed(fm_flags_of(p)); }
FM_INLINE void fm_flags_set(const void *p, unsigned flags) { fm_store_relaxed(fm_flags_of(p), (uint16_t)flags); }

/* ---- arenas (FastMM5 defaults: a thread tries them in order, skipping locked ones) ---- */
#define FM_SMALL_ARENAS 4
#define FM_MEDIUM_ARENAS 4
#define FM_LARGE_ARENAS 8

/* ---- small blocks ----------------------------------------------------------------------- */
#if UINTPTR_MAX > 0xffffffffu
#define FM_SMALL_CLASS_COUNT 51
#define FM_SMALL_GRANULARITY_SHIFT 4
#else
#define FM_SMALL_CLASS_COUNT 61
#define FM_SMALL_GRANULARITY_SHIFT 3
#endif
#define FM_SMALL_MAX_BLOCK 2624u                    /* largest class, 2-byte header included */
#define FM_SMALL_MAX_USER (FM_SMALL_MAX_BLOCK - 2u) /* 2622 */
#define FM_SMALL_LOOKUP_SIZE (((FM_SMALL_MAX_USER + 1u) >> FM_SMALL_GRANULARITY_SHIFT) + 1u)
/* A plain span's blocks start 144 bytes in: a block of a class that is a multiple of 64 then
 * starts 16 bytes into a line, so its flag word and its first bytes share that line (free reads
 * the one and writes the other). Aligned requests (32 or 64 bytes, a minimum alignment above 16)
 * take twin classes instead: the classes that are multiples of 32 again, whose spans start their
 * blocks at 128 bytes, so that a block is aligned to gcd(its size, 64). A class index below
 * FM_SMALL_CLASS_COUNT is a plain class, the ones above it are the twins. */
#define FM_SMALL_SPAN_HEADER 144u
#define FM_SMALL_TWIN_HEADER 128u
#define FM_SMALL_TWIN_COUNT 41
#define FM_SMALL_INDEX_COUNT (FM_SMALL_CLASS_COUNT + FM_SMALL_TWIN_COUNT)
/* Where block 0 of a span of class index c starts. */
FM_INLINE uint32_t fm_small_head_of(unsigned c)
{
    return c < FM_SMALL_CLASS_COUNT ? FM_SMALL_SPAN_HEADER : FM_SMALL_TWIN_HEADER;
}
#define FM_SMALL_MIN_BLOCKS_PER_SPAN 16u
#define FM_SMALL_OPTIMAL_BLOCKS_PER_SPAN 64u
#define FM_SMALL_OPTIMAL_SPAN_LOWER 19264u /* 2880 + 16 KiB */
#define FM_SMALL_OPTIMAL_SPAN_UPPER 101184u /* 2880 + 96 KiB */

struct fm_small_manager;

/*
 * A small-block span: a medium block (flagged is_small_span) whose first 128 bytes are this
 * header. Block i's user pointer is span + head + i * block_size; its flag word sits in the last
 * two bytes of block i-1 (for block 0: the two bytes before head, which for a twin's span are the
 * header's last two).
 */
typedef struct fm_small_span {
    /* Read by every free() of the span's blocks, from any thread, and written only when the span
     * is set up or released (fed_floor: while the feed hands out its blocks): this line stays
     * shared in every CPU's cache. For free()'s fast validation (api.c), so that it need not
     * visit the manager or the medium span's bitmap: the span's address xor a per-process random
     * key while the span is a live small span (0 once released), the class geometry, and how far
     * down the feed has come (a block below fed_floor was never handed out: its flag word is
     * whatever the memory held, so it must not be read as one). block_size is odd_part <<
     * odd_shift; odd_inverse is odd_part's inverse modulo 2^32 (fm_small_block_index). */
    uintptr_t seal;
    struct fm_small_manager *manager;
    uint32_t total_blocks;
    uint32_t odd_inverse;
    uint32_t fed_floor;                 /* offset of the lowest block the feed has handed out */
    uint16_t block_size;
    uint8_t class_index;
    uint8_t odd_shift;
    uint32_t head;                      /* offset of block 0: FM_SMALL_SPAN_HEADER or _TWIN_HEADER */
    uint8_t pad_read[64 - 2 * sizeof(void *) - 20];
    /* Written under the manager's lock by every refill and give-back: a line of its own. */
    struct fm_small_span *next_partial; /* list of spans that have free blocks */
    struct fm_small_span *prev_partial;
    void *first_free;                   /* free blocks, linked through their first word */
    void *last_free;                    /* the list's last block while first_free is not NULL */
    uint32_t blocks_in_use;             /* unfed blocks count as in use: no early release */
    uint8_t in_partial_list;
    uint8_t pad_written[64 - 4 * sizeof(void *) - 4 - 1 - 2];
    uint16_t twin_block0_flags;         /* a twin span's block 0 flag word (a plain one's: at 142) */
} fm_small_span_t;
FM_STATIC_ASSERT(sizeof(fm_small_span_t) == FM_SMALL_TWIN_HEADER,
                 "a twin span's block 0 flag word must be the last two bytes of the header");

/*
 * One size class in one arena. The sequential feed (a fresh span handed out from its top block
 * downwards) runs without the lock: `feed` packs the offset of the last block handed out (low 32
 * bits) with an ABA counter (high 32 bits) that changes whenever the feed span is replaced.
 */
typedef struct fm_small_manager {
    fm_lock_t lock;
    uint16_t block_size;
    uint16_t class_index;
    fm_small_span_t *partial_head;
    fm_small_span_t *feed_span;
    uint64_t feed;
    void *pending;                      /* lock-free pending-free stack */
    uint32_t min_span_size;
    uint32_t optimal_span_size;
    uint32_t reciprocal;                /* ceil(2^32 / block_size): exact division of offsets */
    uint32_t arena;
    uint64_t served;                    /* allocations served (statistics) */
} FM_CACHE_ALIGNED fm_small_manager_t;

/* ---- medium blocks ------------------------------------------------------------------------ */
#define FM_MEDIUM_ALIGN 64u
#define FM_MEDIUM_HEADER 8u
#define FM_MEDIUM_MIN_BLOCK 2880u      /* 2624 + 256: the first bin; smaller free blocks are fragments */
#define FM_MEDIUM_MAX_BLOCK 558912u
#define FM_MEDIUM_MAX_USER (FM_MEDIUM_MAX_BLOCK - FM_MEDIUM_HEADER) /* 558904 */
#define FM_MEDIUM_BIN_GROUPS 32u
#define FM_MEDIUM_BINS_PER_GROUP 32u
#define FM_MEDIUM_BIN_COUNT (FM_MEDIUM_BIN_GROUPS * FM_MEDIUM_BINS_PER_GROUP)
#define FM_MEDIUM_MIDDLE_BINS_START 101184u
#define FM_MEDIUM_FINAL_BINS_START 297792u
#define FM_MEDIUM_MAX_SPAN ((size_t)4 << 20) /* sizes are stored /64 in 16 bits */
#define FM_MEDIUM_INPLACE_DOWNSIZE_LIMIT 720u /* 2880 / 4 */

/*
 * The 8 bytes before a medium block. A block's size includes the header of the block after it,
 * so its usable size is size - 8. A free block also stores its size in the 4 bytes before the
 * next header (the boundary tag that lets the next block merge backwards).
 */
typedef struct fm_medium_header {
    uint16_t size64;        /* block size / 64; 0 marks the span's end sentinel */
    uint16_t span_offset64; /* (user pointer - span) / 64 */
    uint8_t prev_free;
    uint8_t is_small_span;
    uint16_t flags;         /* the flag word: must be last, directly before the user pointer */
} fm_medium_header_t;
FM_STATIC_ASSERT(sizeof(fm_medium_header_t) == FM_MEDIUM_HEADER, "medium header is 8 bytes");

/* A free block's boundary tag: its size, in the 4 bytes before the header of the block after
 * it, i.e. 12 bytes before that block's user pointer (`block_end`). */
FM_INLINE uint32_t *fm_medium_boundary_tag(const void *block_end)
{
    return (uint32_t *)((uintptr_t)block_end - FM_MEDIUM_HEADER - sizeof(uint32_t));
}

struct fm_medium_manager;

/*
 * A medium span: one OS mapping. After the 64-byte header comes a bitmap with one bit per
 * 64 bytes of the span, set where an in-use block starts. It is what makes free() fail closed:
 * a pointer is a medium block only if its bit is set, whatever the bytes before it say.
 */
typedef struct fm_medium_span {
    struct fm_medium_span *next;
    struct fm_medium_span *prev;
    struct fm_medium_manager *manager;
    uint32_t span_size;
    uint32_t first_block;    /* offset of the first block's user pointer */
    uint32_t used_blocks;    /* in-use blocks: O(1) "is the span empty" without coalescing */
    uint8_t pad[64 - 3 * sizeof(void *) - 3 * sizeof(uint32_t)];
    uint64_t in_use_bits[];  /* span_size / 64 bits */
} fm_medium_span_t;
FM_STATIC_ASSERT(sizeof(fm_medium_span_t) == 64, "the bitmap starts at offset 64");

typedef struct fm_medium_free_links {
    struct fm_medium_free_links *next;
    struct fm_medium_free_links *prev;
} fm_medium_free_links_t;

typedef struct fm_medium_manager {
    fm_lock_t lock;
    uint32_t arena;
    void *pending;
    fm_medium_span_t *spans;      /* every span of the arena */
    fm_medium_span_t *feed_span;  /* the span blocks are carved from, bottom up */
    uint32_t feed_offset;         /* user pointer offset of the next block carved from feed_span */
    uint64_t feed_receded_ms;     /* when a big freed block last went back to the feed; 0: no
                                   * pages there to give back since (medium.c's decay) */
    uint32_t group_bitmap;        /* bit g: some bin of group g is non-empty */
    uint32_t bin_bitmaps[FM_MEDIUM_BIN_GROUPS];
    fm_medium_free_links_t *bins[FM_MEDIUM_BIN_COUNT];
    uint64_t served;
    fm_medium_span_t *kept_empty; /* an empty, uncoalesced span kept for reuse (one per arena) */
    void *quarantine[8];          /* damaged freed blocks found under the lock, to report */
    const char *quarantine_op[8]; /* the operation that found a plain one; NULL: a debug block */
    unsigned quarantine_count;
} FM_CACHE_ALIGNED fm_medium_manager_t;

FM_INLINE fm_medium_header_t *fm_medium_header_of(const void *p)
{
    return (fm_medium_header_t *)((uintptr_t)p - FM_MEDIUM_HEADER);
}
FM_INLINE size_t fm_medium_block_size(const void *p) { return (size_t)fm_medium_header_of(p)->size64 * 64u; }
FM_INLINE fm_medium_span_t *fm_medium_span_of(const void *p)
{
    return (fm_medium_span_t *)((uintptr_t)p - (uintptr_t)fm_medium_header_of(p)->span_offset64 * 64u);
}

/* ---- large blocks ------------------------------------------------------------------------- */
#define FM_LARGE_HEADER 64u
#define FM_LARGE_GRANULARITY ((size_t)65536)

struct fm_large_manager;

/* The 64 bytes before a large block's user pointer. The mapping may start before it (aligned
 * allocations); map_base and map_size describe the whole mapping. */
typedef struct fm_large_header {
    struct fm_large_header *next;
    struct fm_large_header *prev;
    struct fm_large_manager *manager;
    void *map_base;
    size_t map_size;
    size_t user_size;        /* the size last requested */
    uint32_t spare_chunks;   /* 64 KiB chunks at the end beyond the block (a retained mapping reused) */
    uint32_t touched_chunks; /* 64 KiB chunks from map_base its users may have written (large.c) */
    uint8_t recycled;        /* a retained mapping reused (large.c): not known to be zero */
    uint8_t short_reuses;    /* frees of smaller blocks since its last whole trim (large.c) */
    uint16_t charged_chunks; /* spare chunks that may hold stale pages, counted in the spare budget */
    uint8_t pad[64 - 6 * sizeof(void *) - 8 - 6];
    uint16_t flags;
} fm_large_header_t;
FM_STATIC_ASSERT(sizeof(fm_large_header_t) == FM_LARGE_HEADER, "large header is 64 bytes");

typedef struct fm_large_manager {
    fm_lock_t lock;
    uint32_t arena;
    fm_large_header_t *first;
    void *pending;
    uint64_t served;
} FM_CACHE_ALIGNED fm_large_manager_t;

FM_INLINE fm_large_header_t *fm_large_header_of(const void *p)
{
    return (fm_large_header_t *)((uintptr_t)p - FM_LARGE_HEADER);
}
/* Up to the end of the block's nominal mapping: FastMM5's size for the request, whatever spare
 * chunks a reused mapping has beyond it. */
FM_INLINE size_t fm_large_usable(const fm_large_header_t *h)
{
    return (size_t)((uintptr_t)h->map_base + h->map_size - ((size_t)h->spare_chunks << 16) -
                    ((uintptr_t)h + FM_LARGE_HEADER));
}

#endif
