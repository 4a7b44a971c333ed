/* fileio.c — safe opening of named inputs and outputs (see fileio.h). */
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

/* What a non-regular file is, for messages. */
static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

cera_status cera_open_regular(const char *path, int *fd, struct stat *sb, cera_error *err) {
    *fd = -1;
    if (!path) return cera_fail(err, CERA_ERR_INVALID_ARG, "no file name");
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer */
    const int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0) return cera_fail(err, CERA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat s;
    if (fstat(f, &s) != 0) {
        const int e = errno;
        close(f);
        return cera_fail(err, CERA_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(s.st_mode)) {
        close(f);
        return cera_fail(err, CERA_ERR_IO, "%s: not a regular file (%s)", path, file_kind(s.st_mode));
    }
    const int fl = fcntl(f, F_GETFL);
    if (fl >= 0) (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    if (sb) *sb = s;
    return CERA_OK;
}

bool cera_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return a && b && !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

cera_status cera_check_not_input(const char *out, const char *in, const char *what, cera_error *err) {
    if (cera_same_file(out, in))
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "%s: the output is %s (%s): refusing to write over an input", out, what, in);
    return CERA_OK;
}

static char *dup_str(const char *s) {
    const size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* A name no other writer picks: the pid, the clock and a counter mixed (collisions only
 * cost a retry: the file is created with O_EXCL). */
static uint32_t tmp_suffix(unsigned attempt) {
    static unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x =
        (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32);
    x ^= (uint64_t)__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0xBF58476D1CE4E5B9ull + attempt;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (uint32_t)x;
}

/* Whether the symlink path names one of the process's descriptors (/dev/stdout,
 * /dev/fd/N, /proc/self/fd/N): its link text or its folder is in /proc. */
static bool is_fd_alias(const char *path) {
    char link[64];
    const ssize_t n = readlink(path, link, sizeof link - 1);
    if (n > 0) {
        link[n] = '\0';
        if (!strncmp(link, "/proc/", 6)) return true;
    }
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (!slash) return false;
    slash[slash == parent] = '\0'; /* "/x" -> "/" */
    char *real = realpath(parent, NULL);
    const bool in_proc = real && !strncmp(real, "/proc/", 6);
    free(real);
    return in_proc;
}

/* Opens path to write through (a device, a FIFO, a descriptor alias), appending so that
 * `>>` redirections keep what they hold. */
static cera_status open_through(cera_outfile *o, const char *path, cera_error *err) {
    o->target = dup_str(path);
    o->fd = o->target ? open(path, O_WRONLY | O_APPEND | O_NOCTTY | O_CLOEXEC) : -1;
    if (o->fd < 0) {
        const int e = o->target ? errno : ENOMEM;
        cera_outfile_abort(o);
        return cera_fail(err, CERA_ERR_IO, "%s: cannot open for writing: %s", path, strerror(e));
    }
    return CERA_OK;
}

cera_status cera_outfile_open(cera_outfile *o, const char *path, bool allow_stream, cera_error *err) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    if (!path || !*path) return cera_fail(err, CERA_ERR_INVALID_ARG, "no output file name");
    struct stat ls;
    mode_t mode = 0666;
    bool replace_mode = false;
    if (lstat(path, &ls) == 0) {
        struct stat s = ls;
        const bool link = S_ISLNK(ls.st_mode);
        if (link && stat(path, &s) != 0)
            return cera_fail(err, CERA_ERR_IO, "%s: a symbolic link that does not resolve: %s", path,
                             strerror(errno));
        const bool stream = S_ISCHR(s.st_mode) || S_ISFIFO(s.st_mode);
        if (allow_stream && (stream || (link && S_ISREG(s.st_mode) && is_fd_alias(path))))
            return open_through(o, path, err);
        if (!S_ISREG(s.st_mode))
            return cera_fail(err, CERA_ERR_IO,
                             "%s: exists and is %s, not a regular file: refusing to replace it", path,
                             file_kind(s.st_mode));
        if (link) {
            /* the link stays, the file it names is replaced */
            o->target = realpath(path, NULL);
            if (!o->target)
                return cera_fail(err, CERA_ERR_IO, "%s: cannot resolve the symbolic link: %s", path,
                                 strerror(errno));
        }
        mode = s.st_mode & 07777;
        replace_mode = true;
    } else if (errno != ENOENT) {
        return cera_fail(err, CERA_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (!o->target) o->target = dup_str(path);
    const size_t n = o->target ? strlen(o->target) : 0;
    o->tmp = o->target ? malloc(n + 16) : NULL;
    if (!o->tmp) {
        cera_outfile_abort(o);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    int e = EEXIST;
    for (unsigned attempt = 0; attempt < 100 && o->fd < 0 && e == EEXIST; attempt++) {
        snprintf(o->tmp, n + 16, "%s.%08x.tmp", o->target, (unsigned)tmp_suffix(attempt));
        o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (o->fd < 0) e = errno;
    }
    if (o->fd < 0) {
        free(o->tmp); /* never created: nothing to remove */
        o->tmp = NULL;
        cera_outfile_abort(o);
        return cera_fail(err, CERA_ERR_IO, "%s: cannot create a temporary file beside it: %s", path,
                         strerror(e));
    }
    if (replace_mode) (void)fchmod(o->fd, mode); /* the replaced file's permissions */
    return CERA_OK;
}

FILE *cera_outfile_stream(cera_outfile *o) {
    if (!o->fp && o->fd >= 0) o->fp = fdopen(o->fd, "wb");
    return o->fp;
}

cera_status cera_outfile_commit(cera_outfile *o, cera_error *err) {
    bool ok = true;
    int e = 0;
    if (o->fp) {
        if (fflush(o->fp) != 0 || ferror(o->fp)) ok = false, e = errno;
        if (fclose(o->fp) != 0 && ok) ok = false, e = errno;
        o->fp = NULL;
        o->fd = -1;
    } else if (o->fd >= 0) {
        if (close(o->fd) != 0) ok = false, e = errno;
        o->fd = -1;
    }
    cera_status st = CERA_OK;
    if (!ok) {
        st = cera_fail(err, CERA_ERR_IO, "%s: cannot write: %s", o->target, strerror(e));
    } else if (o->tmp) {
        /* checked again: the target may have changed since the open */
        struct stat s;
        if (stat(o->target, &s) == 0 && !S_ISREG(s.st_mode))
            st = cera_fail(err, CERA_ERR_IO, "%s: is now %s, not a regular file: refusing to replace it",
                           o->target, file_kind(s.st_mode));
        else if (rename(o->tmp, o->target) != 0)
            st = cera_fail(err, CERA_ERR_IO, "%s: cannot rename %s into place: %s", o->target, o->tmp,
                           strerror(errno));
        else {
            free(o->tmp); /* renamed: nothing left to remove */
            o->tmp = NULL;
        }
    }
    cera_outfile_abort(o);
    return st;
}

void cera_outfile_abort(cera_outfile *o) {
    if (o->fp)
        fclose(o->fp);
    else if (o->fd >= 0)
        close(o->fd);
    o->fp = NULL;
    o->fd = -1;
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    free(o->target);
    o->tmp = o->target = NULL;
}
