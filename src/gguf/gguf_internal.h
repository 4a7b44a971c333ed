/*
 * gguf_internal.h — what the GGUF reader, lookups and writer share, private to src/gguf.
 *
 * The reader decodes into an arena (a chain of blocks freed at once by gguf_close);
 * keys and tensor names get an open-addressing hash index so that duplicate checks at
 * open and lookups afterwards are O(1) even for adversarial files with millions of
 * entries. Scalars are read byte by byte as little-endian, so the reader works on any
 * host and at any alignment.
 */
#ifndef CERA_GGUF_INTERNAL_H
#define CERA_GGUF_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"

/* ---- Arena ---------------------------------------------------------------- */

typedef struct gguf_arena gguf_arena;

/* A zeroed block of n bytes aligned to 16, or NULL when out of memory. */
void *gguf_arena_alloc(gguf_arena **a, size_t n);
void gguf_arena_free(gguf_arena *a);

/* ---- Hash index of names --------------------------------------------------- */

/* Slots hold index + 1 (0 = empty); the capacity is a power of two >= 2 n. */
struct gguf_index {
    uint64_t mask;
    uint64_t *slots;
};

uint64_t gguf_hash(const char *s, uint64_t len);
/* An empty index for n names, in the arena; NULL when out of memory. */
struct gguf_index *gguf_index_new(gguf_arena **a, uint64_t n);
/* Inserts name as entry i of items (stride bytes apart, the gguf_str name at name_off);
 * returns the index of an earlier entry of that name, or -1. */
int64_t gguf_index_insert(struct gguf_index *ix, gguf_str name, uint64_t i, const void *items, size_t stride,
                          size_t name_off);

/* ---- Little-endian loads and stores ---------------------------------------- */

static inline uint16_t gguf_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t gguf_ld32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t gguf_ld64(const uint8_t *p) { return gguf_ld32(p) | (uint64_t)gguf_ld32(p + 4) << 32; }
static inline float gguf_ldf32(const uint8_t *p) {
    uint32_t u = gguf_ld32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline double gguf_ldf64(const uint8_t *p) {
    uint64_t u = gguf_ld64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* Names in error messages: at most GGUF_NAME_SHOWN bytes of a key or tensor name,
 * control bytes and quotes shown as '?', so a hostile name cannot garble a terminal. */
#define GGUF_NAME_SHOWN 96
static inline const char *gguf_show_name(gguf_str s, char buf[GGUF_NAME_SHOWN + 1]) {
    size_t n = s.len > GGUF_NAME_SHOWN ? GGUF_NAME_SHOWN : (size_t)s.len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.data[i];
        buf[i] = (c < 0x20 || c == 0x7f || c == '\'') ? '?' : (char)c;
    }
    buf[n] = '\0';
    return buf;
}

#endif
