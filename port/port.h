/* port.h: the only door between ocellus and the operating system / compiler.
 * Threads, file mapping, the monotonic clock, aligned memory and CPU feature detection.
 * Everything OS- or compiler-specific lives in the port/ sources behind these declarations; src/ never
 * tests OS or compiler macros. Errors are returned as values; nothing here aborts. */
#ifndef OC_PORT_H
#define OC_PORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- threads ------------------------------------------------------------------------------------ */
/* Opaque storage big enough for the platform's thread, mutex and condition variable types;
 * port/threads.c checks the sizes at compile time. */
typedef struct { _Alignas(16) unsigned char opaque[64]; } oc_port_thread;
typedef struct { _Alignas(16) unsigned char opaque[64]; } oc_port_mutex;
typedef struct { _Alignas(16) unsigned char opaque[64]; } oc_port_cond;

/* Each returns 0 on success, an errno-style code otherwise. */
int  oc_port_thread_start(oc_port_thread *t, void *(*fn)(void *), void *arg);
int  oc_port_thread_join(oc_port_thread *t);
int  oc_port_mutex_init(oc_port_mutex *m);
void oc_port_mutex_destroy(oc_port_mutex *m);
void oc_port_mutex_lock(oc_port_mutex *m);
void oc_port_mutex_unlock(oc_port_mutex *m);
int  oc_port_cond_init(oc_port_cond *c);
void oc_port_cond_destroy(oc_port_cond *c);
void oc_port_cond_wait(oc_port_cond *c, oc_port_mutex *m);
void oc_port_cond_broadcast(oc_port_cond *c);
/* Number of online CPUs (>= 1). */
int  oc_port_n_cpus(void);

/* ---- files ----------------------------------------------------------------------------------------- */
typedef struct oc_port_mapping {
    const void *data;
    size_t n_bytes;
    int is_mapped;   /* 1: mmap'ed; 0: read into a heap buffer (fallback); 2: read into memory from
                        the caller's alloc_fn (oc_port_read_file): unmapping leaves it to the caller */
} oc_port_mapping;

/* Map a whole file read-only; falls back to reading it into memory obtained from malloc when
 * mapping is unavailable. On failure returns an errno-style code and writes a message (naming the
 * path) into msg. An empty file maps to data == NULL, n_bytes == 0. */
int  oc_port_map_file(const char *path, oc_port_mapping *out, char *msg, size_t msg_bytes);
void oc_port_unmap_file(oc_port_mapping *m);
/* Read a whole regular file into memory from alloc_fn(user, size) instead of mapping it: a mapped
 * file that is truncated or rewritten underneath kills the process (SIGBUS) or changes under it;
 * a copy does not. On failure after alloc_fn succeeded, out->data still holds that memory for the
 * caller to free. Same errors and messages as oc_port_map_file; "the file got shorter" when it
 * shrank while being read. */
int  oc_port_read_file(const char *path, void *(*alloc_fn)(void *user, size_t n_bytes), void *user,
                       oc_port_mapping *out, char *msg, size_t msg_bytes);
/* The folder holding the running program (symbolic links resolved), without a trailing slash,
 * into buf: how the CLI finds the data installed beside it (PREFIX/bin/../share/ocellus) from any
 * working directory. Returns 0 when the system cannot say (no /proc/self/exe) or buf is too
 * small, else the length written. */
size_t oc_port_program_dir(char *buf, size_t buf_bytes);

/* The one way the tools open an input as a stream: path must be a regular file, checked on the
 * open descriptor before a byte is read (a FIFO neither blocks the open nor is read: it would hang
 * on a writer that never comes; a folder or a device is refused too). NULL on failure with a
 * message naming the path (never the file's contents). */
FILE *oc_port_fopen_regular(const char *path, char *msg, size_t msg_bytes);
/* 1 when path names a regular file that can be opened for reading (opened as above, closed). */
int  oc_port_is_regular_file(const char *path);
/* Set an environment variable for this process (tools: a switch a library reads at open, such as
 * OCELLUS_CL_PROFILE). Returns 0 on success. */
int  oc_port_setenv(const char *name, const char *value);

/* Can path be written (created or appended to)? Checked before a long run rather than after it.
 * Nothing is truncated: a file that did not exist is created and removed again; an existing FIFO
 * with no reader yet passes (it is opened when the result is written). 0, or an errno-style code
 * and a message naming the path. */
int  oc_port_check_writable(const char *path, char *msg, size_t msg_bytes);

/* ---- time and memory --------------------------------------------------------------------------------- */
uint64_t oc_port_now_ns(void);   /* monotonic */
void *oc_port_aligned_alloc(size_t alignment, size_t n_bytes);  /* NULL on failure */
void  oc_port_aligned_free(void *p);
/* Peak resident set size of this process in bytes, or 0 when unknown. */
uint64_t oc_port_peak_rss_bytes(void);
/* CPU seconds (user + system) of this process's children that have ended and been waited for
 * (a benchmark's share of the cores for a program it ran), or -1 when unknown. */
double oc_port_children_cpu_s(void);
/* The load average over the last minute (runnable processes), or -1 when unknown. */
double oc_port_load_average(void);
/* CPU seconds (user + system) this process has used so far, all its threads, or -1 when unknown. */
double oc_port_self_cpu_s(void);
/* CPU seconds every process on the machine has kept a CPU busy since boot, summed over CPUs (user,
 * nice, system, irq, softirq, and steal: time a hypervisor gave this VM's CPUs to someone else), or -1
 * where the OS does not say (Linux: /proc/stat, in clock ticks, so 10 ms steps per CPU). A benchmark
 * subtracts its own CPU time from the difference over a run to see what else ran. */
double oc_port_machine_busy_cpu_s(void);

/* A hint to bring the cache line holding p closer for reading; nothing where the compiler has no
 * such builtin. p need not be dereferenceable (a prefetch never faults). */
#if defined(__GNUC__) || defined(__clang__)
#define OC_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define OC_PREFETCH(p) ((void)(p))
#endif

/* ---- serving (examples/serve, port/posix_serve.c) ----------------------------------------------------- */
/* The canonical absolute path of path (links and .. resolved) into out; 0 or an errno-style code. */
int oc_port_real_path(const char *path, char *out, size_t out_bytes);
/* Block SIGINT and SIGTERM in the calling thread (threads it starts later inherit the mask, so
 * only oc_port_stop_signal_wait sees them) and ignore SIGPIPE. 0 or an errno-style code. */
int oc_port_stop_signals_block(void);
/* Wait up to timeout_ms for SIGINT or SIGTERM: the signal's number, or 0 when none came. */
int oc_port_stop_signal_wait(int timeout_ms);
/* 1 when the peer of the connected socket fd has closed it (or it failed), else 0; never blocks. */
int oc_port_socket_peer_closed(int fd);
/* A socket address for a numeric IPv4 or IPv6 host (no name lookup) and port into out (at least
 * 128 bytes): its length and family. 0, or EINVAL for anything but a numeric address. */
int oc_port_sockaddr(const char *host, int port, void *out, size_t out_bytes, size_t *n_bytes, int *is_ipv6);
/* This process's resident set now, in bytes, or 0 when unknown. */
uint64_t oc_port_rss_bytes(void);

/* ---- CPU features ------------------------------------------------------------------------------------- */
typedef struct oc_cpu_features {
    /* x86-64 (each also requires the OS to save the register state: checked with xgetbv) */
    unsigned avx2 : 1, fma : 1, f16c : 1;
    unsigned avx512f : 1, avx512bw : 1, avx512vl : 1, avx512dq : 1;
    unsigned avx512vnni : 1, avx512bf16 : 1, avxvnni : 1;
    /* not a CPUID bit: vdpbf16ps delivers at least the FP32 FMA FLOP rate, so the GEMMs of F16 and
     * BF16 matrices (vision encoder, text prefill) take the BF16 path (matmul.h). Set for AMD
     * family 0x19 (Zen 4) and 0x1A (Zen 5) with AVX512_BF16: a Zen 4 measured 2.0x the FMA rate,
     * an Emerald Rapids core 0.5x (BENCHMARKS.md "matmul"), so Intel stays off until measured.
     * OCELLUS_CPU_FEATURES=-bf16_fast turns it off (the exact FP32 path), +bf16_fast on. */
    unsigned bf16_fast : 1;
    /* aarch64 / armv7 */
    unsigned neon : 1, dotprod : 1, fp16 : 1, i8mm : 1, bf16 : 1;
    char vendor[16];
} oc_cpu_features;

/* Detects the features, then applies the environment variable OCELLUS_CPU_FEATURES when set: a
 * comma-separated list of +name / -name (avx2 fma f16c avx512f avx512bw avx512vl avx512dq
 * avx512vnni avx512bf16 avxvnni bf16_fast neon dotprod fp16 i8mm bf16) that adds or removes bits,
 * for A/B measurements and for hypervisors that hide CPUID bits the CPU executes. Adding a feature
 * the CPU lacks makes the kernels fault (SIGILL); unknown names are ignored. */
void oc_port_cpu_features(oc_cpu_features *out);

#endif /* OC_PORT_H */
