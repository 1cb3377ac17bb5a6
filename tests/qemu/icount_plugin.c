/* icount_plugin.c: a qemu TCG plugin (host code, built with HOSTCC) counting the guest instructions
 * a qemu-user run executes, for the instruction ratios in BENCHMARKS.md: emulated time says nothing
 * about a board's speed, the instruction count is exact and repeatable. Every translated block
 * gets a callback that adds its instruction count when it runs (a block left early by a fault
 * counts whole; ours do not fault). At guest exit it writes "insns N" to out=FILE, or to stderr.
 * The plugin API declarations (qemu-plugin.h, API version 1, as in Debian 12's qemu 7.2) are
 * written out here because Debian ships no plugin header. Driven by tests/qemu/icount.sh. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
struct qemu_info;   /* only passed through */
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS = 0 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);

#define EXPORT __attribute__((visibility("default")))
EXPORT int qemu_plugin_version = 1;

static uint64_t n_insns;          /* guest threads run on several host threads: atomic adds */
static char out_path[4096];

static void block_ran(unsigned int vcpu_index, void *n_block_insns) {
    (void)vcpu_index;
    __atomic_fetch_add(&n_insns, (uint64_t)(uintptr_t)n_block_insns, __ATOMIC_RELAXED);
}

static void block_translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    void *n = (void *)(uintptr_t)qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_cb(tb, block_ran, QEMU_PLUGIN_CB_NO_REGS, n);
}

static void guest_exited(qemu_plugin_id_t id, void *user) {
    (void)id; (void)user;
    FILE *f = out_path[0] ? fopen(out_path, "w") : NULL;
    fprintf(f ? f : stderr, "insns %llu\n", (unsigned long long)__atomic_load_n(&n_insns, __ATOMIC_RELAXED));
    if (f) fclose(f);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const struct qemu_info *info, int argc, char **argv);
EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const struct qemu_info *info, int argc, char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++)
        if (!strncmp(argv[i], "out=", 4)) snprintf(out_path, sizeof out_path, "%s", argv[i] + 4);
    qemu_plugin_register_vcpu_tb_trans_cb(id, block_translated);
    qemu_plugin_register_atexit_cb(id, guest_exited, NULL);
    return 0;
}
