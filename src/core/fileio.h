/*
 * fileio.h — opening the files a user names without being fooled by what they are.
 *
 * Inputs (models, adapters, configs) are opened so that a FIFO or a device cannot block
 * the open and is refused as "not a regular file". Outputs are written to a fresh
 * temporary file beside the target (created exclusively, never through a symlink) and
 * renamed over it only when complete; a target that exists and is not a regular file is
 * refused (or, for outputs that are plain streams, written through), never replaced.
 */
#ifndef CERA_CORE_FILEIO_H
#define CERA_CORE_FILEIO_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>

#include "cera.h"

/* Opens path read-only without blocking on a FIFO or a device (O_NONBLOCK, then fstat)
 * and refuses anything but a regular file. *fd (O_CLOEXEC, blocking again) and, when
 * non-NULL, *sb receive the file. */
cera_status cera_open_regular(const char *path, int *fd, struct stat *sb, cera_error *err);

/* True when both paths exist and name the same file (device and inode: links and other
 * spellings of one file compare equal). */
bool cera_same_file(const char *a, const char *b);

/* CERA_ERR_INVALID_ARG naming both when the output out would write over the input in
 * (what: "the model", "the adapter", ...). OK when out does not exist yet. */
cera_status cera_check_not_input(const char *out, const char *in, const char *what, cera_error *err);

/* An output file being written. */
typedef struct cera_outfile {
    char *target; /* the file the result replaces (a symlink's target, resolved) */
    char *tmp;    /* the temporary file beside it; NULL when writing through (stream) */
    int fd;
    FILE *fp; /* a stdio stream over fd, made by cera_outfile_stream */
} cera_outfile;

/* Starts writing path. An existing regular file (or a symlink to one, whose target is
 * replaced and the link kept) is replaced when the file is committed; a missing one is
 * created. With allow_stream (the logits command), a character device, a FIFO or a
 * descriptor alias (/dev/stdout, /dev/fd/N) is written through, appending; otherwise they
 * are refused, as are directories, sockets, block devices and dangling symlinks. The
 * temporary file is PATH.XXXXXXXX.tmp in the target's folder, created with O_EXCL |
 * O_NOFOLLOW, so an existing file or symlink of that name is never written. */
cera_status cera_outfile_open(cera_outfile *o, const char *path, bool allow_stream, cera_error *err);
/* A stdio stream over the file (owned by o); NULL when out of memory. */
FILE *cera_outfile_stream(cera_outfile *o);
/* Closes the file and renames it into place; on any failure removes the temporary file. */
cera_status cera_outfile_commit(cera_outfile *o, cera_error *err);
/* Closes and removes the temporary file (a failed write); safe after commit and after a
 * failed cera_outfile_open. */
void cera_outfile_abort(cera_outfile *o);

#endif
