/*
 * serve_disk.h — the disk tier under `cera serve`'s prefix cache (serve_disk.c): finished
 * timelines cut to whole KV blocks, kept as saved sessions in a size-capped folder
 * (--cache-dir), so that a prompt sharing their beginning, in this process or a later one,
 * loads the prefix's KV instead of computing it.
 *
 * The scheduler calls serve_disk_put, _find, _load, _done and _cancel with its lock held: none
 * of them touches the disk or waits on it. A reader thread loads files into sessions and a
 * writer thread writes them and keeps the folder under its cap.
 */
#ifndef CERA_CLI_SERVE_DISK_H
#define CERA_CLI_SERVE_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cera.h"
#include "serve_cache.h"

/* Timelines queued for the writer at most (each a fork holding its KV blocks); a timeline
 * that ends while the writer has that many is not written. */
#define SERVE_DISK_WRITES 2
/* Sessions the disk tier may hold beside the running and cached ones: the writer's forks and
 * a load that goes on after its request ended. */
#define SERVE_DISK_SEQS (SERVE_DISK_WRITES + 1)

typedef struct serve_disk serve_disk;

typedef struct serve_disk_params {
    const char *dir;
    uint64_t cap;     /* bytes of our files at most */
    size_t chunk_max; /* the scheduler's prompt chunk (the rounding rules of serve_cache.h) */
    size_t n_ctx;     /* the engine's context: longer files are of no use here */
    bool any;         /* --cache-any: reuse a prefix whatever its rounding */
    bool verbose;
    cera_adapter *const *adapters; /* those requests may attach (their fingerprints are taken once) */
    int n_adapters;
    void (*wake)(void *arg); /* called, with no lock held, when a load has ended */
    void *wake_arg;
} serve_disk_params;

/* Whether dir is a folder this process can create files in (an error naming it when not). */
cera_status serve_disk_check_dir(const char *dir, cera_error *err);
/* Checks the folder, reads which of its files are ours, deletes the least recently used past
 * the cap and starts the reader and the writer. */
cera_status serve_disk_open(cera_engine *e, const serve_disk_params *p, serve_disk **out, cera_error *err);
/* Writes what is queued, stops the threads and frees (the loads must have ended or been
 * cancelled). NULL: nothing. */
void serve_disk_close(serve_disk *d);

/* A sequence's timeline (its prompt read, or at its end): session s, attached to set, its first
 * n_mode positions rounded as mode (serve_mode_extent). Its longest prefix of whole KV blocks (usable as
 * such) is queued for writing, as a fork cut back to it, unless the folder holds it, or a prefix of it that a
 * later prompt would take as readily (see serve_disk_find), already. */
void serve_disk_put(serve_disk *d, cera_session *s, const serve_adapter_set *set, int mode, size_t n_mode);

/* A file to load for a prompt: its id, its positions, how many of them begin the prompt, and
 * how many of those to keep (the rounding rules may want fewer). */
typedef struct serve_disk_hit {
    uint64_t id;
    size_t n_file, n_match, n_use;
} serve_disk_hit;

/* The file sharing the longest beginning with prompt (at a block boundary below n_prompt) for
 * the adapter set, with the part of it usable by serve_cache.h's rounding rules (all of it
 * with any), when that is worth loading over the `have` positions the RAM cache gives (enough
 * more that loading beats computing the difference): hit->n_use, 0 when none. The file is kept
 * from eviction until its load ends (or serve_disk_release). */
size_t serve_disk_find(serve_disk *d, const cera_token *prompt, size_t n_prompt, const serve_adapter_set *set,
                       size_t have, serve_disk_hit *hit);
/* Gives back a file serve_disk_find kept for a load that is not made. */
void serve_disk_release(serve_disk *d, const serve_disk_hit *hit);
/* Loads the file of hit into s, a new session with the set's adapters, on the reader thread,
 * and cuts it back to hit->n_use; prompt is the one serve_disk_find was given, tag names the
 * load in serve_disk_done. False when out of memory: s stays the caller's and the file is
 * released. */
bool serve_disk_load(serve_disk *d, const serve_disk_hit *hit, cera_session *s, const cera_token *prompt,
                     void *tag);
/* A load that has ended: its tag, *s its session (the caller's again), *n the positions it
 * holds (0: the file was refused, or did not fit the KV pool, or could not be cut back; the
 * session then holds nothing) and *ms the time it took. False when none is waiting. */
bool serve_disk_done(serve_disk *d, void **tag, cera_session **s, size_t *n, double *ms);
/* The load of tag is no longer wanted: its session when it is back in the caller's hands (to
 * free), NULL when the reader has it (the reader frees it when done). */
cera_session *serve_disk_cancel(serve_disk *d, void *tag);

typedef struct serve_disk_stats {
    uint64_t files, bytes, cap;        /* our files now */
    uint64_t hits, tokens;             /* loads that gave a prefix, and their positions */
    uint64_t writes, refused, evicted; /* files written, refused at a load (deleted), evicted */
} serve_disk_stats;

void serve_disk_stats_get(serve_disk *d, serve_disk_stats *st);

#endif
