/* posix.c: threads, file mapping, clock and aligned memory on POSIX systems (Linux, macOS, BSD).
 * The whole file is one OS implementation of port.h. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "port.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(pthread_t) <= sizeof(oc_port_thread), "oc_port_thread too small");
_Static_assert(sizeof(pthread_mutex_t) <= sizeof(oc_port_mutex), "oc_port_mutex too small");
_Static_assert(sizeof(pthread_cond_t) <= sizeof(oc_port_cond), "oc_port_cond too small");

int oc_port_thread_start(oc_port_thread *t, void *(*fn)(void *), void *arg) {
    return pthread_create((pthread_t *)(void *)t->opaque, NULL, fn, arg);
}
int oc_port_thread_join(oc_port_thread *t) {
    return pthread_join(*(pthread_t *)(void *)t->opaque, NULL);
}
int oc_port_mutex_init(oc_port_mutex *m) { return pthread_mutex_init((pthread_mutex_t *)(void *)m->opaque, NULL); }
void oc_port_mutex_destroy(oc_port_mutex *m) { pthread_mutex_destroy((pthread_mutex_t *)(void *)m->opaque); }
void oc_port_mutex_lock(oc_port_mutex *m) { pthread_mutex_lock((pthread_mutex_t *)(void *)m->opaque); }
void oc_port_mutex_unlock(oc_port_mutex *m) { pthread_mutex_unlock((pthread_mutex_t *)(void *)m->opaque); }
int oc_port_cond_init(oc_port_cond *c) { return pthread_cond_init((pthread_cond_t *)(void *)c->opaque, NULL); }
void oc_port_cond_destroy(oc_port_cond *c) { pthread_cond_destroy((pthread_cond_t *)(void *)c->opaque); }
void oc_port_cond_wait(oc_port_cond *c, oc_port_mutex *m) {
    pthread_cond_wait((pthread_cond_t *)(void *)c->opaque, (pthread_mutex_t *)(void *)m->opaque);
}
void oc_port_cond_broadcast(oc_port_cond *c) { pthread_cond_broadcast((pthread_cond_t *)(void *)c->opaque); }

int oc_port_n_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

static int read_whole_file(int fd, size_t n_bytes, oc_port_mapping *out) {
    unsigned char *buf = malloc(n_bytes);
    if (!buf) return ENOMEM;
    size_t done = 0;
    while (done < n_bytes) {
        ssize_t r = read(fd, buf + done, n_bytes - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { int e = r < 0 ? errno : EIO; free(buf); return e; }
        done += (size_t)r;
    }
    out->data = buf;
    out->n_bytes = n_bytes;
    out->is_mapped = 0;
    return 0;
}

/* Opens path for reading if it is a regular file; its size in *n_bytes. Returns the descriptor, or
 * -1 with *e set and a message naming the path. */
static int open_regular(const char *path, size_t *n_bytes, int *e, char *msg, size_t msg_bytes) {
    /* O_NONBLOCK: open() on a FIFO (or a device) would wait for a writer forever; the file type is
     * checked below, before anything is read. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        *e = errno;
        snprintf(msg, msg_bytes, "%s: cannot open: %s", path, strerror(*e));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        *e = errno;
        snprintf(msg, msg_bytes, "%s: cannot stat: %s", path, strerror(*e));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(msg, msg_bytes, "%s: not a regular file", path);
        close(fd);
        *e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);   /* a regular file: reads may block again */
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        snprintf(msg, msg_bytes, "%s: file too large for this address space", path);
        close(fd);
        *e = EFBIG;
        return -1;
    }
    *n_bytes = (size_t)st.st_size;
    return fd;
}

int oc_port_map_file(const char *path, oc_port_mapping *out, char *msg, size_t msg_bytes) {
    memset(out, 0, sizeof *out);
    size_t n;
    int e = 0, fd = open_regular(path, &n, &e, msg, msg_bytes);
    if (fd < 0) return e;
    if (n == 0) { close(fd); return 0; }
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
        out->data = p;
        out->n_bytes = n;
        out->is_mapped = 1;
    } else {
        e = read_whole_file(fd, n, out);   /* e.g. file systems without mmap */
        if (e) snprintf(msg, msg_bytes, "%s: cannot map or read: %s", path, strerror(e));
    }
    close(fd);
    return e;
}

int oc_port_read_file(const char *path, void *(*alloc_fn)(void *user, size_t n_bytes), void *user,
                      oc_port_mapping *out, char *msg, size_t msg_bytes) {
    memset(out, 0, sizeof *out);
    size_t n;
    int e = 0, fd = open_regular(path, &n, &e, msg, msg_bytes);
    if (fd < 0) return e;
    unsigned char *buf = n ? alloc_fn(user, n) : NULL;
    if (n && !buf) {
        snprintf(msg, msg_bytes, "%s: out of memory for %zu bytes", path, n);
        close(fd);
        return ENOMEM;
    }
    for (size_t done = 0; done < n;) {
        ssize_t r = read(fd, buf + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {   /* r == 0: the file shrank while we read it */
            e = r < 0 ? errno : EIO;
            snprintf(msg, msg_bytes, "%s: cannot read: %s", path, r < 0 ? strerror(e) : "the file got shorter");
            close(fd);
            out->data = buf;   /* the caller frees what it allocated */
            out->n_bytes = n;
            out->is_mapped = 2;
            return e;
        }
        done += (size_t)r;
    }
    close(fd);
    out->data = buf;
    out->n_bytes = n;
    out->is_mapped = 2;
    return 0;
}

FILE *oc_port_fopen_regular(const char *path, char *msg, size_t msg_bytes) {
    size_t n;
    int e = 0, fd = open_regular(path, &n, &e, msg, msg_bytes);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        snprintf(msg, msg_bytes, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int oc_port_check_writable(const char *path, char *msg, size_t msg_bytes) {
    int created = 1, fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) {
        created = 0;
        fd = open(path, O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0 && errno == ENXIO) return 0;   /* a FIFO nobody reads yet */
    }
    if (fd < 0) {
        int e = errno;
        snprintf(msg, msg_bytes, "%s: cannot write: %s", path, strerror(e));
        return e;
    }
    close(fd);
    if (created) unlink(path);
    return 0;
}

int oc_port_setenv(const char *name, const char *value) { return setenv(name, value, 1); }

int oc_port_is_regular_file(const char *path) {
    char msg[64];
    FILE *f = oc_port_fopen_regular(path, msg, sizeof msg);
    if (f) fclose(f);
    return f != NULL;
}

void oc_port_unmap_file(oc_port_mapping *m) {
    if (!m || !m->data) return;
    if (m->is_mapped == 2) return;   /* the caller's memory (oc_port_read_file) */
    if (m->is_mapped) munmap((void *)m->data, m->n_bytes);
    else free((void *)m->data);
    m->data = NULL;
    m->n_bytes = 0;
}

uint64_t oc_port_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void *oc_port_aligned_alloc(size_t alignment, size_t n_bytes) {
    void *p = NULL;
    if (alignment < sizeof(void *)) alignment = sizeof(void *);
    if (posix_memalign(&p, alignment, n_bytes ? n_bytes : 1) != 0) return NULL;
    return p;
}
void oc_port_aligned_free(void *p) { free(p); }

uint64_t oc_port_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024u;   /* Linux reports KiB */
}

double oc_port_children_cpu_s(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) != 0) return -1;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec + 1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

size_t oc_port_program_dir(char *buf, size_t buf_bytes) {
    if (!buf || buf_bytes < 2) return 0;
    /* Linux (and BSDs with procfs mounted); elsewhere readlink fails and the caller falls back to
     * its other places. readlink does not terminate the string, and a full buffer may be cut. */
    ssize_t n = readlink("/proc/self/exe", buf, buf_bytes - 1);
    if (n <= 0 || (size_t)n >= buf_bytes - 1) return 0;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash) return 0;
    if (slash == buf) slash++;   /* a program in / keeps "/" */
    *slash = '\0';
    return (size_t)(slash - buf);
}

double oc_port_load_average(void) {
    double one_min;
    return getloadavg(&one_min, 1) == 1 ? one_min : -1;   /* glibc, musl, macOS, the BSDs */
}

double oc_port_self_cpu_s(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec + 1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double oc_port_machine_busy_cpu_s(void) {
#if defined(__linux__)
    /* first line: "cpu  user nice system idle iowait irq softirq steal guest guest_nice" (proc(5));
     * guest time is already inside user, idle and iowait are the CPU doing nothing */
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    unsigned long long v[8] = { 0 };
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (n < 7 || hz <= 0) return -1;   /* steal came with Linux 2.6.11: 0 when absent */
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
#else
    return -1;
#endif
}
